import { create, type DescMethod, type Message } from "@bufbuild/protobuf";
import { ProtocolError, ProtocolErrorCode, ResourceNotFoundError, type Resource, type Server } from "@modelcontextprotocol/server";
import type { RestError } from "../transcode/rest-errors.js";
import { toRestJson } from "../transcode/rest-json.js";
import { LeaseService } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";

/** A unary call's answer as the session makes it: the message, or the hub's refusal as the REST face writes it. */
export interface ResourceAnswer {
  message?: Message;
  error?: RestError;
}

/** What a session lends its resources: the hub's RPCs as its agent, through the same interceptors as every call. */
export interface ResourceCalls {
  /** One unary RPC as the session's agent, reported as one `mcp` call on `route`. */
  call(route: string, path: string, message: Message, signal?: AbortSignal): Promise<ResourceAnswer>;
  /** Opens one server stream as the session's agent, until `signal` aborts: its frames, or the hub's refusal. */
  stream(route: string, path: string, message: Message, signal: AbortSignal): Promise<{ frames?: AsyncIterable<unknown>; error?: RestError }>;
}

/** A session's resource subscriptions: how many are open, and closing them all with the session. */
export interface Subscriptions {
  readonly size: number;
  /** Ends every subscription's stream; resolves once they have all ended. Later subscribes open nothing. */
  close(): Promise<void>;
}

interface ResourceDef extends Resource {
  uri: string;
  /** The unary RPC whose answer (as its tool's structuredContent) the resource holds. */
  read: DescMethod;
  /** The server stream whose frames tell of its changes. */
  watch: DescMethod;
  /** The frames (by the case of their `event`) that are changes; the rest are its opening frame, keep-alives and the like. */
  changes: ReadonlySet<string>;
  /** The stream's request; default: an empty one (the stream opens with a snapshot of now). */
  from?(calls: ResourceCalls, route: string): Promise<Message>;
}

const mimeType = "application/json";
const pathOf = (m: DescMethod) => `/${m.parent.typeName}/${m.name}`;
const subscribeHint = "Subscribe to it (resources/subscribe, or subscriptions/listen on protocol 2026-07-28) to be told with notifications/resources/updated when it changes, instead of polling; then read it again.";

/** A hub refusal as a JSON-RPC error, with the hub's error body (its `code` among it) as the data. */
function refusal(e: RestError): ProtocolError {
  return new ProtocolError(e.status >= 500 ? ProtocolErrorCode.InternalError : ProtocolErrorCode.InvalidRequest, String(e.body.error), e.body);
}

/** ReadInbox's largest page. */
const inboxPage = 100;

/**
 * Where the caller's inbox stream stands now: read on (ReadInbox, a page at a time) until a read
 * answers no event past its cursor. A Subscribe from there replays nothing: each event it sends
 * is a change.
 */
async function inboxHead(calls: ResourceCalls, route: string): Promise<Message> {
  const method = PeerService.method.readInbox;
  let cursor: bigint | undefined;
  for (;;) {
    const out = await calls.call(route, pathOf(method), create(method.input, { limit: inboxPage, ...(cursor !== undefined && { afterCursor: cursor }) }));
    if (out.error) throw refusal(out.error);
    const next = (out.message as unknown as { nextCursor: bigint }).nextCursor;
    if (next === cursor) return create(PeerService.method.subscribe.input, { afterSeq: next });
    cursor = next;
  }
}

/** The resources every session offers: each holds what its tool answers without arguments, and a stream of the hub tells of its changes. */
const resources: ResourceDef[] = [
  {
    uri: "kxm://inbox",
    name: "inbox",
    title: "Your inbox",
    description: `Your inbox on the coordination hub, as JSON (what read_inbox answers without a cursor): the messages sent to you that you have not acknowledged, replies to the messages you sent, and cancellations and expiries. ${subscribeHint} Acknowledge (ack_message) a message once you have taken it on: it then leaves your inbox.`,
    mimeType,
    read: PeerService.method.readInbox,
    watch: PeerService.method.subscribe,
    changes: new Set(["message", "reply", "cancelled", "expired"]),
    from: inboxHead,
  },
  {
    uri: "kxm://agents",
    name: "agents",
    title: "Agents of your project",
    description: `The agents of your project with their presence (online, stale, offline), host and purpose, as JSON (what list_agents answers): who you can message and who may hold a lease. ${subscribeHint} An agent registering, leaving or changing presence changes it.`,
    mimeType,
    read: PresenceService.method.listAgents,
    watch: PresenceService.method.watchPresence,
    changes: new Set(["agent"]),
  },
  {
    uri: "kxm://leases",
    name: "leases",
    title: "Leases of your project",
    description: `The live leases of your project, as JSON (what list_leases answers): what is being worked on, by whom, with which fencing token, until when, and who waits. ${subscribeHint} A lease granted, renewed, released, taken over or lapsed, or its queue changing, changes it.`,
    mimeType,
    read: LeaseService.method.listLeases,
    watch: LeaseService.method.watchLeases,
    changes: new Set(["change"]),
  },
];
const byUri = new Map(resources.map((r) => [r.uri, r]));
const listed: Resource[] = resources.map(({ uri, name, title, description, mimeType }) => ({ uri, name, title, description, mimeType }));

function resourceOf(uri: string): ResourceDef {
  const def = byUri.get(uri);
  if (!def) throw new ResourceNotFoundError(uri, `no resource ${JSON.stringify(uri)}: resources/list names the resources (${resources.map((r) => r.uri).join(", ")})`);
  return def;
}

/** The case of a stream frame's `event` oneof (frames are messages or their init shapes: both have it). */
const caseOf = (frame: unknown) => (frame as { event?: { case?: string } } | undefined)?.event?.case;

interface Subscription {
  stop: AbortController;
  /** Settles once the stream has sent its first frame (from then on every change is told), or failed to open. */
  ready: Promise<void>;
  /** Settles once the stream has ended. */
  done: Promise<void>;
}

/** What a set of watches tells its era's client, and how its calls are named. */
export interface WatchOptions {
  /** Tells the client `uri` changed; one call at a time per resource (a burst is one call). */
  notify(uri: string): Promise<unknown>;
  /** The call records' route, before the URI: `mcp resources/subscribe`, `mcp subscriptions/listen`. */
  route: string;
  /** A watch whose stream ended on its own (its agent taken over), not by unwatch or close. */
  ended?(uri: string): void;
}

/** Resource watches: one hub stream per watched resource, its changes told through `notify`. */
export interface Watches extends Subscriptions {
  /** Opens the watch of `uri` (once); resolves once its stream tells every change, or rejects with the hub's refusal. */
  watch(uri: string): Promise<void>;
  unwatch(uri: string): Promise<void>;
}

/**
 * Watches of resources, era-neutral: a watch is one server stream of the hub (WatchLeases,
 * WatchPresence, PeerService/Subscribe) opened as the caller's agent, which follows the store's
 * change feed (so other replicas' changes count too): each change it reports after its opening
 * frame is told through `notify`, a burst of them once, and never more than one in flight per
 * resource. A 2025-era session's resources/subscribe opens one (told as
 * notifications/resources/updated on its GET stream); a 2026-07-28 subscriptions/listen opens one
 * per kxm:// URI it names (told on its own stream). Whoever opened them closes them.
 */
export function resourceWatches(calls: ResourceCalls, o: WatchOptions): Watches {
  const subs = new Map<string, Subscription>();
  let closed = false;

  /** Tells the client `uri` changed: one notification for a burst, none while one is being sent (a change meanwhile sends one more after it). */
  function notifier(uri: string, stop: AbortSignal) {
    let dirty = false;
    let sending = false;
    return () => {
      dirty = true;
      if (sending) return;
      sending = true;
      void (async () => {
        // The frames of one commit arrive together: let them all land before telling.
        await new Promise((resolve) => setImmediate(resolve));
        while (dirty && !stop.aborted) {
          dirty = false;
          await o.notify(uri).catch(() => undefined);
        }
        sending = false;
      })();
    };
  }

  /** The subscription's stream, from its opening to its end; a stream that ends on its own (its agent taken over) just drops the subscription. */
  async function run(def: ResourceDef, sub: Subscription, opened: () => void, failed: (e: unknown) => void) {
    const route = `${o.route} ${def.uri}`;
    const changed = notifier(def.uri, sub.stop.signal);
    let frames: AsyncIterator<unknown> | undefined;
    let last: IteratorResult<unknown> | undefined;
    let wasOpen = false;
    try {
      const request = def.from ? await def.from(calls, route) : create(def.watch.input);
      const out = await calls.stream(route, pathOf(def.watch), request, sub.stop.signal);
      if (out.error) throw refusal(out.error);
      frames = out.frames![Symbol.asyncIterator]();
      // The opening frame (a snapshot, or the inbox's ready): what the client reads now, not a change.
      last = await frames.next();
      opened();
      wasOpen = true;
      while (!last.done && !sub.stop.signal.aborted) {
        last = await frames.next();
        if (!last.done && def.changes.has(caseOf(last.value) ?? "")) changed();
      }
    } catch (e) {
      failed(e); // once opened, nothing listens: the stream's own call record tells how it ended
    } finally {
      const own = subs.get(def.uri) === sub;
      if (own) subs.delete(def.uri);
      const stopped = sub.stop.signal.aborted;
      sub.stop.abort();
      if (last && !last.done) await frames?.return?.(undefined).catch(() => undefined);
      if (wasOpen && own && !stopped) o.ended?.(def.uri);
    }
  }

  async function watch(uri: string): Promise<void> {
    const def = resourceOf(uri);
    if (closed) return;
    const current = subs.get(uri);
    if (current) return current.ready;
    let opened!: () => void;
    let failed!: (e: unknown) => void;
    const sub: Subscription = {
      stop: new AbortController(),
      ready: new Promise<void>((resolve, reject) => {
        opened = resolve;
        failed = reject;
      }),
      done: Promise.resolve(),
    };
    sub.ready.catch(() => undefined);
    subs.set(uri, sub);
    sub.done = run(def, sub, opened, failed);
    try {
      await sub.ready;
    } catch (e) {
      if (e instanceof ProtocolError) throw e;
      throw new ProtocolError(ProtocolErrorCode.InternalError, `could not subscribe to ${uri}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  async function unwatch(uri: string): Promise<void> {
    resourceOf(uri);
    const sub = subs.get(uri);
    if (sub) {
      subs.delete(uri);
      sub.stop.abort();
      await sub.done;
    }
  }

  return {
    watch,
    unwatch,
    get size() {
      return subs.size;
    },
    async close() {
      closed = true;
      const all = [...subs.values()];
      subs.clear();
      for (const sub of all) sub.stop.abort();
      await Promise.all(all.map((s) => s.done));
    },
  };
}

/** Whether `uri` names one of the resources. */
export const isResource = (uri: string) => byUri.has(uri);

/**
 * Serves `resources/list` and `resources/read` on a `server`, and with `subscribe` (the 2025
 * era's sessions) `resources/subscribe` and `resources/unsubscribe` too. A read is the resource's
 * unary RPC, made as the caller's agent; a subscription is a watch (resourceWatches) told as
 * `notifications/resources/updated` on the session's GET stream. The session closes its
 * subscriptions (`close`) when it ends, however it ends. In the 2026-07-28 era a
 * subscriptions/listen stream takes the place of resources/subscribe (src/mcp/stateless.ts).
 */
export function serveResources(server: Server, calls: ResourceCalls, o: { subscribe: boolean }): Subscriptions {
  async function read(uri: string, signal: AbortSignal) {
    const def = resourceOf(uri);
    const out = await calls.call(`mcp resources/read ${uri}`, pathOf(def.read), create(def.read.input), signal);
    if (out.error) throw refusal(out.error);
    const json = toRestJson(def.read.output, out.message as never);
    return { contents: [{ uri, mimeType, text: JSON.stringify(json) }] };
  }

  server.setRequestHandler("resources/list", () => ({ resources: listed }));
  server.setRequestHandler("resources/templates/list", () => ({ resourceTemplates: [] }));
  server.setRequestHandler("resources/read", (req, ctx) => read(req.params.uri, ctx.mcpReq.signal));
  if (!o.subscribe) return { size: 0, close: async () => undefined };
  const watches = resourceWatches(calls, { notify: (uri) => server.sendResourceUpdated({ uri }), route: "mcp resources/subscribe" });
  server.setRequestHandler("resources/subscribe", async (req) => {
    await watches.watch(req.params.uri);
    return {};
  });
  server.setRequestHandler("resources/unsubscribe", async (req) => {
    await watches.unwatch(req.params.uri);
    return {};
  });
  return watches;
}
