import { MessageSchema, type InboxEvent, type Message } from "../../clients/ts/src/index.js";
import { flagHelp, type FlagDoc } from "../config.js";
import { usageError } from "./command-error.js";
import { callHub } from "./hub-client.js";
import { agentFlagOptions, agentFlags, agentTarget, asAgent, closeSession, openSession, parseFlags, protoJson, refusalOf, restTarget, write, type AgentTarget } from "./agent-target.js";

/**
 * The agent commands for a shell or a script: `agents`, `send`, `inbox`, `reply`. Each one-shot
 * command registers the agent through the client library (or resumes it, offline, with its id,
 * inbox and leases), makes its call and unregisters: the agent is online only while a command
 * runs, and a name online elsewhere (an MCP session, a `lease run`) is refused with
 * duplicate_agent_name rather than taken over. `agents` reads with the project's token alone.
 */

export const agentExitCodesText = `Exit codes: 0 done; 1 refused by the hub (\`kxm-hub: <code>: <message>\` on stderr); 2 usage error;
3 hub unreachable, or its TLS handshake failed (tls_failed).`;

const trailer = `  --json
      print JSON for scripts instead of the summary
  --help, -h
      this text

${agentExitCodesText}`;

export const helpOf = (usage: string, what: string, flags: Record<string, FlagDoc>) => `Usage: ${usage}\n\n${what}\n\n${flagHelp(flags)}\n${trailer}`;

const agentsHelp = helpOf(
  "kxm-hub agents [--all] [--json]",
  "Lists the project's agents: name, presence (online, stale, offline), host, purpose and id, read with\nthe project's token (no agent identity). --all adds the offline ones. --json prints the hub's REST answer.",
  { all: { value: "", meaning: "also list offline agents", default: "online and stale only" }, ...agentFlags },
);

const sendHelp = helpOf(
  "kxm-hub send <target> <text> [--json]",
  "Sends <text> to an agent of the project, by name or id, as KXM_AGENT. A registered agent that is\noffline gets it when it is back. Prints the message id; --json prints the message (ProtoJSON).",
  agentFlags,
);

const inboxHelp = helpOf(
  "kxm-hub inbox [--follow] [--ack] [--json]",
  "Lists KXM_AGENT's pending mail: messages to it not yet acknowledged, replies to messages it sent,\n" +
    "cancellations and expiries, oldest first. --ack acknowledges each message it printed (it is not\n" +
    "listed again). --follow keeps the agent online and prints events as they come, until SIGINT or\n" +
    "SIGTERM. --json prints one JSON object per line: {kind, cursor, message} (message in ProtoJSON).",
  {
    follow: { value: "", meaning: "keep streaming new events", default: "list what is pending, then exit" },
    ack: { value: "", meaning: "acknowledge each message printed", default: "leave them pending" },
    ...agentFlags,
  },
);

const replyHelp = helpOf(
  "kxm-hub reply <message-id> <text> [--json]",
  "Replies to a message to KXM_AGENT; its sender sees the reply in its inbox. --json prints the replied\nmessage (ProtoJSON).",
  agentFlags,
);

interface AgentRow {
  id: string;
  name: string;
  presence?: string;
  host?: string;
  purpose?: string;
}

/** One row per agent: name, presence, host, purpose, id. */
function agentsText(project: string, agents: AgentRow[]): string {
  if (agents.length === 0) return `no agents in project ${project}\n`;
  const rows = [["NAME", "PRESENCE", "HOST", "PURPOSE", "ID"], ...agents.map((a) => [a.name, a.presence ?? "-", a.host ?? "-", a.purpose ?? "-", a.id])];
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return `${rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd()).join("\n")}\n`;
}

/** One line per inbox event for a person. */
function eventText(kind: InboxEvent["kind"], cursor: bigint, m: Message): string {
  const text =
    kind === "message" ? `from ${m.fromName}: ${m.content}`
    : kind === "reply" ? `reply from ${m.toName} to "${m.content}": ${m.reply?.content ?? ""}`
    : kind === "cancelled" ? `cancelled by ${m.fromName}: ${m.content}`
    : `expired (${m.fromName} to ${m.toName}): ${m.content}`;
  return `${cursor}  ${kind}  ${m.id}  ${text.replace(/\n/g, "\n    ")}\n`;
}

const eventJson = (kind: string, cursor: bigint, m: Message) => `${JSON.stringify({ kind, cursor: String(cursor), message: protoJson(MessageSchema, m) })}\n`;

/** A command line parsed: --help asked for, or the flags and arguments. */
export type Parsed = { help: string } | { help: undefined; values: Record<string, string | boolean | undefined>; positionals: string[] };

/** Parses one command's flags; `positional` names its arguments in order. */
function parse(argv: string[], help: string, positional: string[], extra: Record<string, { type: "boolean" }> = {}): Parsed {
  const { values, positionals } = parseFlags(argv, { ...agentFlagOptions, json: { type: "boolean" }, ...extra });
  if (values.help) return { help };
  if (positionals.length !== positional.length) {
    const expected = positional.length === 0 ? "no arguments" : positional.map((p) => `<${p}>`).join(" ");
    throw usageError(`expected ${expected}, got ${positionals.length} argument(s); usage: ${help.split("\n")[0]!.replace(/^Usage: /, "")}`);
  }
  return { help: undefined, values: values as Record<string, string | boolean | undefined>, positionals };
}

export async function agentsCommand(argv: string[]): Promise<void> {
  const p = parse(argv, agentsHelp, [], { all: { type: "boolean" } });
  if (p.help !== undefined) return write(`${p.help}\n`);
  const t = agentTarget(p.values, false);
  const query = new URLSearchParams({ project: t.project, includeOffline: p.values.all ? "true" : "false" });
  const answer = (await callHub(restTarget(t), "GET", `/v1/agents?${query}`)) as { agents?: AgentRow[] };
  await write(p.values.json ? `${JSON.stringify(answer, null, 2)}\n` : agentsText(t.project, answer.agents ?? []));
}

export async function sendCommand(argv: string[]): Promise<void> {
  const p = parse(argv, sendHelp, ["target", "text"]);
  if (p.help !== undefined) return write(`${p.help}\n`);
  const t = agentTarget(p.values, true);
  const [target, content] = p.positionals;
  const message = await asAgent(t, "kxm-hub send", async (s) => (await s.peer.sendMessage({ target, content, allowOffline: true })).message!);
  await write(p.values.json ? `${JSON.stringify(protoJson(MessageSchema, message), null, 2)}\n` : `sent ${message.id} to ${message.toName}\n`);
}

export async function replyCommand(argv: string[]): Promise<void> {
  const p = parse(argv, replyHelp, ["message-id", "text"]);
  if (p.help !== undefined) return write(`${p.help}\n`);
  const t = agentTarget(p.values, true);
  const [messageId, content] = p.positionals;
  const message = await asAgent(t, "kxm-hub reply", async (s) => (await s.peer.replyMessage({ messageId, content })).message!);
  await write(p.values.json ? `${JSON.stringify(protoJson(MessageSchema, message), null, 2)}\n` : `replied to ${message.id} from ${message.fromName}\n`);
}

const inboxKinds = ["message", "reply", "cancelled", "expired"] as const;

export async function inboxCommand(argv: string[]): Promise<void> {
  const p = parse(argv, inboxHelp, [], { follow: { type: "boolean" }, ack: { type: "boolean" } });
  if (p.help !== undefined) return write(`${p.help}\n`);
  const t = agentTarget(p.values, true);
  const show = (kind: InboxEvent["kind"], cursor: bigint, m: Message) => write(p.values.json ? eventJson(kind, cursor, m) : eventText(kind, cursor, m));
  if (p.values.follow) return follow(t, show, p.values.ack === true);
  await asAgent(t, "kxm-hub inbox", async (s) => {
    // Page after page until the inbox is read to its end (ReadInbox answers at most 100 at a time).
    let after: bigint | undefined;
    let shown = 0;
    for (;;) {
      const page = await s.peer.readInbox({ limit: 100, ...(after !== undefined && { afterCursor: after }) });
      for (const item of page.events) {
        const kind = item.event.case;
        if (!kind || !inboxKinds.includes(kind)) continue;
        await show(kind, item.cursor, item.event.value);
        shown++;
        if (p.values.ack && kind === "message") await s.peer.ackMessage({ messageId: item.event.value.id });
      }
      // An empty page whose cursor moved on read events that are no longer pending (messages
      // replied to, say): the inbox goes on after them. Only a cursor that stays is its end.
      if (page.nextCursor === after) break;
      after = page.nextCursor;
    }
    if (shown === 0 && !p.values.json) await write("no pending mail\n");
  });
}

/** `inbox --follow`: the library's resuming inbox stream until SIGINT, SIGTERM or SIGHUP. */
async function follow(t: AgentTarget, show: (kind: InboxEvent["kind"], cursor: bigint, m: Message) => Promise<void>, ack: boolean): Promise<void> {
  const session = await openSession(t, "kxm-hub inbox --follow");
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  for (const s of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.once(s, onSignal);
  session.lost.addEventListener("abort", onSignal, { once: true });
  try {
    for await (const ev of session.inbox({ signal: stop.signal })) {
      await show(ev.kind, ev.cursor, ev.message);
      if (ack && ev.kind === "message") await ev.ack();
    }
    if (session.lost.aborted) throw session.lost.reason;
  } catch (e) {
    throw refusalOf(e, t);
  } finally {
    await closeSession(session);
  }
  await write("");
  process.exit(0);
}
