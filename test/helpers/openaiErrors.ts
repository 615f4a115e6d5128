import OpenAI from "openai";

/** The OpenAI client's error for a request the server refused; fails when the request succeeded. */
export async function apiError(p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await p;
  } catch (err) {
    if (err instanceof OpenAI.APIError) return err;
    throw err;
  }
  throw new Error("the request unexpectedly succeeded");
}
