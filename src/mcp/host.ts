import {
  McpServer as McpServer2025,
  ResourceTemplate as ResourceTemplate2025,
  type RegisteredTool as RegisteredTool2025,
} from "@modelcontextprotocol/sdk/server/mcp.js";
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import {
  McpError,
  type CallToolResult,
  type GetPromptResult,
  type ListResourcesResult,
  type ReadResourceResult,
  type ServerNotification,
  type ServerRequest,
  type ToolAnnotations,
} from "@modelcontextprotocol/sdk/types.js";
import {
  McpServer as McpServer2026,
  ProtocolError,
  ResourceTemplate as ResourceTemplate2026,
  type RegisteredTool as RegisteredTool2026,
  type ServerContext as Context2026,
} from "@modelcontextprotocol/server";
import { z } from "zod";

type Extra2025 = RequestHandlerExtra<ServerRequest, ServerNotification>;

/**
 * What a handler reads of the MCP request it answers, whichever revision brought it: 2025-11-25 (and earlier) through
 * `@modelcontextprotocol/sdk`, 2026-07-28 through `@modelcontextprotocol/server`.
 */
export interface McpCall {
  authInfo?: { clientId: string; scopes: string[] };
  /** The MCP connection (a 2025-era transport session); none on 2026-07-28, which has no connections. */
  sessionId?: string;
  /** stdio serves the one local client; HTTP serves strangers. */
  transport: "stdio" | "http";
  signal: AbortSignal;
  _meta?: Record<string, unknown> & { progressToken?: string | number };
  sendNotification: (notification: ServerNotification) => Promise<void>;
}

export interface ToolConfig<I extends z.ZodType> {
  title: string;
  description: string;
  annotations: ToolAnnotations;
  inputSchema: I;
  outputSchema: z.ZodRawShape;
}

export interface ResourceConfig {
  title: string;
  description: string;
  mimeType: string;
}

/** The handlers a tool, a resource and a resource template register, whichever revision serves them. */
export type ToolHandler<I extends z.ZodType> = (args: z.output<I>, call: McpCall) => Promise<CallToolResult>;
export type ReadResource = (uri: URL, call: McpCall) => Promise<ReadResourceResult>;
export type ListResources = (call: McpCall) => Promise<ListResourcesResult>;
export type ReadTemplate = (
  uri: URL,
  variables: Record<string, string | string[]>,
  call: McpCall,
) => Promise<ReadResourceResult>;

/** A registered tool whose input schema follows the library (the load_lora/offload_lora adapter enum). */
export interface ToolHandle {
  /** Sets the whole input schema and tells clients the tool list changed. */
  setInput(schema: z.ZodType): void;
}

/**
 * Where the MCP surface defines its tools, resources and prompts, once for both revisions: each is registered
 * through this interface, on a 2025-era server object per connection (`Host2025`) or a 2026-07-28 one per request
 * (`Host2026`).
 */
export interface McpHost {
  registerTool<I extends z.ZodType>(name: string, config: ToolConfig<I>, handler: ToolHandler<I>): ToolHandle;
  registerResource(name: string, uri: string, config: ResourceConfig, read: ReadResource): void;
  registerResourceTemplate(
    name: string,
    template: string,
    list: ListResources,
    config: ResourceConfig,
    read: ReadTemplate,
  ): void;
  registerPrompt<A extends z.ZodRawShape>(
    name: string,
    config: { description?: string; argsSchema: A },
    handler: (args: z.output<z.ZodObject<A>>) => GetPromptResult,
  ): void;
}

/** The 2025-era SDK's handler extra, with the transport it came over, is an `McpCall`. */
export class Host2025 implements McpHost {
  constructor(
    readonly server: McpServer2025,
    private readonly transport: McpCall["transport"],
  ) {}

  registerTool<I extends z.ZodType>(name: string, config: ToolConfig<I>, handler: ToolHandler<I>): ToolHandle {
    const tool: RegisteredTool2025 = this.server.registerTool(name, config, ((args: z.output<I>, extra: Extra2025) =>
      handler(args, this.call(extra))) as never);
    return {
      setInput(schema) {
        // update({ inputSchema }) would rebuild the schema from a bare shape and lose toolInput's strictness
        tool.inputSchema = schema;
        tool.update({});
      },
    };
  }

  registerResource(name: string, uri: string, config: ResourceConfig, read: ReadResource): void {
    this.server.registerResource(name, uri, config, (u, extra) => read(u, this.call(extra)));
  }

  registerResourceTemplate(
    name: string,
    template: string,
    list: ListResources,
    config: ResourceConfig,
    read: ReadTemplate,
  ): void {
    this.server.registerResource(
      name,
      new ResourceTemplate2025(template, { list: (extra) => list(this.call(extra)) }),
      config,
      (u, variables, extra) => read(u, variables, this.call(extra)),
    );
  }

  registerPrompt<A extends z.ZodRawShape>(
    name: string,
    config: { description?: string; argsSchema: A },
    handler: (args: z.output<z.ZodObject<A>>) => GetPromptResult,
  ): void {
    this.server.registerPrompt(name, config, handler as never);
  }
  private call(extra: Extra2025): McpCall {
    return { ...extra, transport: this.transport };
  }
}

/** The 2026-07-28 SDK's handler context, read as an `McpCall`; its errors carry the same codes. */
export class Host2026 implements McpHost {
  private readonly tools = new Map<string, RegisteredTool2026>();

  constructor(readonly server: McpServer2026) {}

  /** Leaves a tool out of this server's tools/list (the server answers one request: its caller's). */
  unlist(name: string): void {
    this.tools.get(name)?.disable();
  }

  registerTool<I extends z.ZodType>(name: string, config: ToolConfig<I>, handler: ToolHandler<I>): ToolHandle {
    const tool = this.server.registerTool(name, { ...config, outputSchema: z.object(config.outputSchema) }, ((
      args: z.output<I>,
      ctx: Context2026,
    ) => handler(args, callOf(ctx))) as never);
    this.tools.set(name, tool);
    // a server per request is built from the library as it is: nothing calls this in practice
    return { setInput: (schema) => tool.update({ paramsSchema: schema }) };
  }

  registerResource(name: string, uri: string, config: ResourceConfig, read: ReadResource): void {
    this.server.registerResource(name, uri, config, (u: URL, ctx: Context2026) => protocolErrors(read(u, callOf(ctx))));
  }

  registerResourceTemplate(
    name: string,
    template: string,
    list: ListResources,
    config: ResourceConfig,
    read: ReadTemplate,
  ): void {
    this.server.registerResource(
      name,
      new ResourceTemplate2026(template, { list: (ctx) => protocolErrors(list(callOf(ctx))) }),
      config,
      (u, variables, ctx) => protocolErrors(read(u, variables, callOf(ctx))),
    );
  }

  registerPrompt<A extends z.ZodRawShape>(
    name: string,
    config: { description?: string; argsSchema: A },
    handler: (args: z.output<z.ZodObject<A>>) => GetPromptResult,
  ): void {
    this.server.registerPrompt(name, { ...config, argsSchema: z.object(config.argsSchema) }, handler as never);
  }
}

function callOf(ctx: Context2026): McpCall {
  return {
    authInfo: ctx.http?.authInfo,
    sessionId: ctx.sessionId,
    transport: "http",
    signal: ctx.mcpReq.signal,
    _meta: ctx.mcpReq._meta as McpCall["_meta"],
    sendNotification: (notification) => ctx.mcpReq.notify(notification),
  };
}

/** A 2025-era protocol error (an unknown trace) thrown where the 2026 SDK answers its own error type. */
async function protocolErrors<T>(work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    if (err instanceof McpError) throw new ProtocolError(err.code, err.message, err.data);
    throw err;
  }
}
