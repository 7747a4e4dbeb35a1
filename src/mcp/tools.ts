import { getOption, hasOption, type DescMethod } from "@bufbuild/protobuf";
import { errorTable } from "../errors.js";
import { servedServices } from "../server/routes.js";
import { FieldBehavior, field_behavior } from "../../gen/ts/google/api/field_behavior_pb.js";
import { docs } from "../../gen/ts/kxm/hub/v1/docs.js";
import { mcp_tool } from "../../gen/ts/kxm/hub/v1/options_pb.js";
import { inputSchemaOf, outputSchemaOf, type JsonSchema } from "./schema.js";

/**
 * The tools the MCP face offers: each is one RPC of the hub, called in-process as the session's
 * agent, through the same interceptors as every other face (wire/in-process.ts). A tool names
 * the request fields a model may set; the session fills the rest (the agent's id). No tool takes
 * a sender, an agent id or a key: identity belongs to the session.
 *
 * The table is read off the proto (one source): the RPCs of the served services that carry the
 * `(kxm.hub.v1.mcp_tool)` option (proto/kxm/hub/v1/options.proto) are the tools, with the
 * option's name, hints and session-filled fields; a tool's description is the RPC's leading
 * comment (or the option's `description`), its input the request's fields, each described by
 * its leading comment (gen/ts/kxm/hub/v1/docs.ts, generated from the comments), and its
 * required inputs the fields marked `(google.api.field_behavior) = REQUIRED`. Only the one-line
 * text of an answer is written here.
 */
export interface ToolDef {
  name: string;
  method: DescMethod;
  description: string;
  /** Request fields by proto name, with what a model should know of each. */
  fields: Record<string, string>;
  required?: string[];
  /** Request fields the session sets (`agent_id`: the session's agent). */
  bound?: "agent_id"[];
  annotations: { readOnlyHint: boolean; destructiveHint: boolean; idempotentHint: boolean; openWorldHint: false };
  /** One line for clients that show only text. */
  text(out: Record<string, any>): string; // eslint-disable-line @typescript-eslint/no-explicit-any
}

type Text = ToolDef["text"];

const leaseLine = (l: Record<string, unknown> | undefined) =>
  l ? `lease ${String(l.name)} held by ${String(l.holderAgentName)} with fencing token ${String(l.fencingToken)} until ${String(l.expiresAt)}` : "no lease";
const messageLine = (m: Record<string, unknown> | undefined) =>
  m ? `message ${String(m.id)} from ${String(m.fromName)} to ${String(m.toName)}: ${String(m.status)}` : "no message";

/** Each tool's answer in one line (presentation: the answer's REST JSON is the structured content). */
const texts: Record<string, Text> = {
  register: (o) => `you are ${String(o.agent?.name)} (${String(o.agent?.id)}) in project ${String(o.agent?.project)}${o.resumed ? " (resumed)" : ""}${o.takenOver ? " (taken over)" : ""}`,
  whoami: (o) => `you are ${String(o.agent?.name)} (${String(o.agent?.id)}) in project ${String(o.agent?.project)}`,
  list_agents: (o) => `${(o.agents ?? []).length} agent(s): ${(o.agents ?? []).map((a: Record<string, unknown>) => `${String(a.name)} (${String(a.presence)})`).join(", ")}`,
  send_message: (o) => `sent ${messageLine(o.message)}`,
  read_inbox: (o) =>
    `${(o.events ?? []).length} event(s), next cursor ${String(o.nextCursor)}${(o.events ?? [])
      .map((e: Record<string, any>) => { // eslint-disable-line @typescript-eslint/no-explicit-any
        const [kind, m] = Object.entries(e).find(([k]) => k !== "cursor") ?? ["?", {}];
        return `; ${kind} ${String(m.id)} from ${String(m.fromName)}: ${String(m.reply?.content ?? m.content)}`;
      })
      .join("")}`,
  ack_message: (o) => `acknowledged ${messageLine(o.message)}`,
  reply_message: (o) => `replied to ${messageLine(o.message)}`,
  cancel_message: (o) => `cancelled ${messageLine(o.message)}`,
  get_message: (o) => `${messageLine(o.message)}${o.message?.reply ? `; reply: ${String(o.message.reply.content)}` : ""}`,
  acquire_lease: (o) => `granted ${leaseLine(o.lease)}`,
  renew_lease: (o) => `renewed ${leaseLine(o.lease)}`,
  release_lease: (o) => `released ${leaseLine(o.lease)}`,
  get_lease: (o) => `${leaseLine(o.lease)}${o.expired ? " (lapsed)" : ""}`,
  list_leases: (o) => `${(o.leases ?? []).length} lease(s): ${(o.leases ?? []).map((l: Record<string, unknown>) => `${String(l.name)} (${String(l.holderAgentName)}, token ${String(l.fencingToken)})`).join(", ")}`,
};

/** The request fields a session fills (src/mcp/face.ts): the agent's id. */
const sessionFillable = new Set(["agent_id"]);
/**
 * Request fields no tool offers: the agent and its key belong to the session, and so does the
 * project, which comes with the agent's credentials (a request's `project` serves operators
 * without an agent identity; an agent always acts in its own project).
 */
const identity = new Set(["agent_id", "agent_key", "project"]);

const methods = servedServices.flatMap((s) => s.methods).filter((m) => hasOption(m, mcp_tool));

/**
 * The proto's comments as a model reads them: the RPCs that are tools by their tool names
 * (AckMessage: ack_message), error codes as the face's refusals spell them (LEASE_HELD:
 * lease_held), and without the `Auth:` lines (who may call an RPC on the other faces: here the
 * session authenticates).
 */
const toolNames = new Map(methods.map((m) => [m.name, getOption(m, mcp_tool).name]));
const codes = new Map(Object.keys(errorTable).map((c) => [c.toUpperCase(), c]));
const words = new RegExp(`\\b(${[...toolNames.keys(), ...codes.keys()].join("|")})\\b`, "g");
const forModel = (comment: string) =>
  comment
    .split("\n\n")
    .map((paragraph) => paragraph.split("\n").filter((line) => !line.startsWith("Auth: ")).join("\n"))
    .filter((paragraph) => paragraph !== "")
    .join("\n\n")
    .replace(words, (w) => toolNames.get(w) ?? codes.get(w) ?? w);

function docOf(key: string): string {
  const doc = docs[key];
  if (doc === undefined) throw new Error(`gen/ts/kxm/hub/v1/docs.ts has no ${key}: run npm run generate`);
  return forModel(doc);
}

function toolOf(method: DescMethod): ToolDef {
  const opt = getOption(method, mcp_tool);
  const where = `${method.parent.typeName}.${method.name} (mcp_tool ${JSON.stringify(opt.name)})`;
  const request = method.input;
  for (const f of [...opt.sessionFields, ...opt.hiddenFields]) {
    if (!request.fields.some((x) => x.name === f)) throw new Error(`${where}: ${request.typeName} has no field ${f}`);
  }
  for (const f of opt.sessionFields) if (!sessionFillable.has(f)) throw new Error(`${where}: the session cannot fill ${f}`);
  if (opt.readOnly && (opt.destructive || !opt.idempotent)) throw new Error(`${where}: a read-only tool is idempotent and not destructive`);
  const offered = request.fields.filter((f) => !opt.sessionFields.includes(f.name) && !opt.hiddenFields.includes(f.name) && f.name !== "project");
  for (const f of offered) if (identity.has(f.name)) throw new Error(`${where}: ${f.name} is the session's, never a model's`);
  const text = texts[opt.name];
  if (!text) throw new Error(`${where}: no one-line text for ${opt.name} in src/mcp/tools.ts`);
  const required = offered.filter((f) => getOption(f, field_behavior).includes(FieldBehavior.REQUIRED)).map((f) => f.name);
  return {
    name: opt.name,
    method,
    description: opt.description !== "" ? opt.description : docOf(`${method.parent.typeName}.${method.name}`),
    fields: Object.fromEntries(offered.map((f) => [f.name, docOf(`${request.typeName}.${f.name}`)])),
    ...(required.length > 0 && { required }),
    ...(opt.sessionFields.length > 0 && { bound: opt.sessionFields as "agent_id"[] }),
    annotations: { readOnlyHint: opt.readOnly, destructiveHint: opt.destructive, idempotentHint: opt.idempotent, openWorldHint: false },
    text,
  };
}

export const tools: ToolDef[] = methods.map(toolOf);

for (const [i, t] of tools.entries()) {
  if (tools.findIndex((x) => x.name === t.name) !== i) throw new Error(`two RPCs are the MCP tool ${t.name}`);
}
for (const name of Object.keys(texts)) {
  if (!tools.some((t) => t.name === name)) throw new Error(`src/mcp/tools.ts has a one-line text for ${name}, which no RPC's mcp_tool names`);
}

/** A tool as `tools/list` shows it. */
export const listed = (t: ToolDef): { name: string; description: string; inputSchema: JsonSchema; outputSchema: JsonSchema; annotations: ToolDef["annotations"] } => ({
  name: t.name,
  description: t.description,
  inputSchema: inputSchemaOf(t.method.input, t.fields, t.required),
  outputSchema: withoutSecrets(outputSchemaOf(t.method.output)),
  annotations: t.annotations,
});

/**
 * Answer fields a model never sees: the agent key `register` gets back belongs to the session
 * (the hub keeps it to act as the agent), and a key in a transcript is a key anyone reading it
 * could use.
 */
const secrets = ["agentKey"];

function withoutSecrets(schema: JsonSchema): JsonSchema {
  const properties = { ...(schema.properties as Record<string, JsonSchema>) };
  for (const k of secrets) delete properties[k];
  return { ...schema, properties };
}

/** An answer's REST JSON as a tool's structured content: its secrets left out. */
export function presented(json: Record<string, unknown>): Record<string, unknown> {
  const out = { ...json };
  for (const k of secrets) delete out[k];
  return out;
}
