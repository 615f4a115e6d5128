import { z } from "zod";
import { EngineRequestError } from "../../../engine/index.js";
import type { EngineHttp } from "../client/EngineHttp.js";

const ModelsSchema = z.object({
  data: z.array(
    z.object({ id: z.string(), parent: z.string().nullish(), max_model_len: z.number().int().positive().nullish() }),
  ),
});

/**
 * The base model an OpenAI-compatible engine serves (GET /v1/models; vLLM lists loaded adapters too, with their
 * base as `parent`): the one `model` names, else the first base. Fails naming engine.remote.model when absent.
 */
export async function servedBaseModel(
  http: EngineHttp,
  model: string | undefined,
): Promise<{ id: string; contextSize?: number }> {
  const list = await http.answer({ path: "/v1/models" }, ModelsSchema);
  const bases = list.data.filter((m) => !m.parent);
  const card = model === undefined ? bases[0] : bases.find((m) => m.id === model);
  if (!card) {
    const served = bases.map((m) => m.id).join(", ") || "none";
    throw new EngineRequestError(
      http.label,
      200,
      model === undefined
        ? "GET /v1/models lists no model"
        : `it serves no model "${model}" (it serves: ${served}); set engine.remote.model (--engine-model) to one of them`,
    );
  }
  return { id: card.id, contextSize: card.max_model_len ?? undefined };
}

/** The tokens of an engine's /tokenize (vLLM's and SGLang's answer alike). */
export const TokenizeSchema = z.object({ tokens: z.array(z.number().int()) });

/** Whether an error body says the route does not exist (FastAPI's 404), not that a named thing is missing. */
export const isMissingRoute = (status: number, body: unknown) =>
  status === 404 && (body as { detail?: unknown } | null)?.detail === "Not Found";
