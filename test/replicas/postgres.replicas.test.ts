import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { LeaseEventKind, LeaseService, type WatchLeasesResponse } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PresenceService } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { OpenMessageChangeKind, OpsService, type WatchOpenMessagesResponse } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { serveCli, type ServingCli } from "../fixtures/cli.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/**
 * Three `kxm-hub serve` processes on one PostgreSQL database, as an operator runs replicas: one
 * fence across them, and a message sent through one reaching a Subscribe stream on another.
 */

let server: TestPostgres;
let hubs: ServingCli[] = [];
let databaseUrl: string;
beforeAll(async () => {
  server = await startPostgres();
  const url = (databaseUrl = await server.createDatabase());
  // One at a time, so the first migrates; the others find the schema ready.
  for (let i = 0; i < 3; i++) {
    hubs.push(await serveCli(["--port", "0", "--log-path", "-"], { env: { KXM_DATABASE_URL: url } }));
  }
}, 60_000);
afterAll(async () => {
  await Promise.all(hubs.map((h) => h.stop()));
  hubs = [];
  await server?.stop();
});

interface Agent {
  id: string;
  headers: Record<string, string>;
}

async function register(base: string, name: string): Promise<Agent> {
  const res = await fetch(`${base}/v1/agents/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name, project: "p" }),
  });
  expect(res.status).toBe(201);
  const body = (await res.json()) as { agent: { id: string }; agentKey: string };
  return { id: body.agent.id, headers: { "x-kxm-agent-id": body.agent.id, "x-kxm-agent-key": body.agentKey } };
}

/** Calls waiting in lease queues, read from the database the hubs share. */
async function queueLength(): Promise<number> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    return Number((await c.query<{ n: string }>("SELECT count(*) AS n FROM lease_waiters")).rows[0]!.n);
  } finally {
    await c.end();
  }
}

const post = (base: string, path: string, headers: Record<string, string>, json: unknown) =>
  fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(json) });

describe("three hubs on one PostgreSQL database", () => {
  it("50 agents spread over the hubs race for one lease: one winner a round, tokens strictly growing", async () => {
    // Each agent registers on one hub and calls only that one.
    const agents = await Promise.all(Array.from({ length: 50 }, (_, i) => register(hubs[i % 3]!.url, `racer-${i}`)));
    const tokens: number[] = [];
    for (let round = 0; round < 10; round++) {
      const answers = await Promise.all(
        agents.map(async (a, i) => {
          const res = await post(hubs[i % 3]!.url, "/v1/leases/race/acquire", a.headers, { ttlMs: 60_000 });
          return { i, status: res.status, body: (await res.json()) as { lease?: { fencingToken: number }; code?: string } };
        }),
      );
      const winners = answers.filter((x) => x.status === 200);
      expect(winners).toHaveLength(1);
      expect(answers.filter((x) => x.status === 409).every((x) => x.body.code === "lease_held")).toBe(true);
      const { i, body } = winners[0]!;
      tokens.push(body.lease!.fencingToken);
      // Released through another hub than the one that granted it.
      const rel = await post(hubs[(i + 1) % 3]!.url, "/v1/leases/race/release", agents[i]!.headers, { fencingToken: body.lease!.fencingToken });
      expect(rel.status).toBe(200);
    }
    expect(tokens).toEqual(tokens.map((_, k) => tokens[0]! + k));
    expect(tokens[0]).toBe(1);
  });

  it("a message sent through the first hub reaches a Subscribe stream on the third", async () => {
    const sender = await register(hubs[0]!.url, "sender");
    const recipient = await register(hubs[2]!.url, "recipient");
    const peer = createClient(PeerService, createConnectTransport({ baseUrl: hubs[2]!.url, httpVersion: "2" }));
    const ac = new AbortController();
    const frames = peer.subscribe({}, { headers: recipient.headers, signal: ac.signal })[Symbol.asyncIterator]();
    expect((await frames.next()).value?.event.case).toBe("ready");
    const sent = await post(hubs[0]!.url, "/v1/messages", sender.headers, { target: recipient.id, content: "across hubs" });
    expect(sent.status).toBe(202);
    const sentAt = performance.now();
    let frame = (await frames.next()).value;
    while (frame && frame.event.case !== "message") frame = (await frames.next()).value;
    const waitedMs = performance.now() - sentAt;
    expect(frame?.event.case).toBe("message");
    expect(frame?.event.case === "message" && frame.event.value.content).toBe("across hubs");
    // Heard through the inbox tail (a poll every 20 ms), not the 15 s keep-alive.
    expect(waitedMs).toBeLessThan(5_000);
    ac.abort();
  });

  it("a WatchLeases watcher on the second hub sees a grant made on the first, and resumes with its cursor on the third", async () => {
    const holder = await register(hubs[0]!.url, "watched-holder");
    const other = await register(hubs[2]!.url, "watched-other");
    const watcher = await register(hubs[1]!.url, "lease-watcher");
    const leasesOn = (i: number) => createClient(LeaseService, createConnectTransport({ baseUrl: hubs[i]!.url, httpVersion: "2" }));
    const kindAndName = (f: WatchLeasesResponse | undefined) =>
      f?.event.case === "change" ? `${LeaseEventKind[f.event.value.kind]} ${f.event.value.lease?.name} by ${f.event.value.lease?.holderAgentName}` : f?.event.case;

    const ac = new AbortController();
    const onSecond = leasesOn(1).watchLeases({}, { headers: watcher.headers, signal: ac.signal })[Symbol.asyncIterator]();
    const snap = (await onSecond.next()).value as WatchLeasesResponse;
    expect(snap.event.case).toBe("snapshot");
    const granted = await post(hubs[0]!.url, "/v1/leases/watched/acquire", holder.headers, { ttlMs: 60_000 });
    expect(granted.status).toBe(200);
    const seen = (await onSecond.next()).value as WatchLeasesResponse;
    expect(kindAndName(seen)).toBe("GRANTED watched by watched-holder");
    expect(seen.cursor).toBe(snap.cursor + 1n);
    ac.abort();

    // While nobody watches: a release on the first hub, a grant on the third.
    const { lease } = (await granted.json()) as { lease: { fencingToken: number } };
    expect((await post(hubs[0]!.url, "/v1/leases/watched/release", holder.headers, { fencingToken: lease.fencingToken })).status).toBe(200);
    expect((await post(hubs[2]!.url, "/v1/leases/watched/acquire", other.headers, { ttlMs: 60_000 })).status).toBe(200);

    const ac3 = new AbortController();
    const onThird = leasesOn(2).watchLeases({ afterCursor: seen.cursor }, { headers: watcher.headers, signal: ac3.signal })[Symbol.asyncIterator]();
    const frames = [(await onThird.next()).value, (await onThird.next()).value, (await onThird.next()).value] as WatchLeasesResponse[];
    expect(frames.map((f) => [kindAndName(f), f.cursor])).toEqual([
      ["keepAlive", seen.cursor],
      ["RELEASED watched by watched-holder", seen.cursor + 1n],
      ["GRANTED watched by watched-other", seen.cursor + 2n],
    ]);
    ac3.abort();
  });

  it("a waiter on the second hub is granted, in queue order, a lease released on the first", async () => {
    const holder = await register(hubs[0]!.url, "queue-holder");
    const first = await register(hubs[1]!.url, "queue-first");
    const second = await register(hubs[2]!.url, "queue-second");
    const granted = await post(hubs[0]!.url, "/v1/leases/queued/acquire", holder.headers, { ttlMs: 60_000 });
    const token = ((await granted.json()) as { lease: { fencingToken: number } }).lease.fencingToken;
    const waitOn = (i: number, a: Agent) => post(hubs[i]!.url, "/v1/leases/queued/acquire", a.headers, { ttlMs: 60_000, waitMs: 30_000 });
    const firstWait = waitOn(1, first);
    // Queued in this order: the second waiter comes once the first is in the queue.
    for (let i = 0; i < 500 && (await queueLength()) < 1; i++) await new Promise((r) => setTimeout(r, 10));
    const secondWait = waitOn(2, second);
    for (let i = 0; i < 500 && (await queueLength()) < 2; i++) await new Promise((r) => setTimeout(r, 10));
    expect(await queueLength()).toBe(2);

    const releasedAt = performance.now();
    expect((await post(hubs[0]!.url, "/v1/leases/queued/release", holder.headers, { fencingToken: token })).status).toBe(200);
    const got = await firstWait;
    const waitedMs = performance.now() - releasedAt;
    expect(got.status).toBe(200);
    const lease = ((await got.json()) as { lease: { holderAgentName: string; fencingToken: number } }).lease;
    expect(lease).toMatchObject({ holderAgentName: "queue-first", fencingToken: token + 1 });
    // Heard through the change tail (every 20 ms), not by polling or the wait running out.
    expect(waitedMs).toBeLessThan(5_000);
    expect((await post(hubs[1]!.url, "/v1/leases/queued/release", first.headers, { fencingToken: lease.fencingToken })).status).toBe(200);
    const next = (await (await secondWait).json()) as { lease: { holderAgentName: string; fencingToken: number } };
    expect(next.lease).toMatchObject({ holderAgentName: "queue-second", fencingToken: token + 2 });
  });

  it("a WatchPresence watcher on the third hub sees an agent register on the first", async () => {
    const watcher = await register(hubs[2]!.url, "presence-watcher");
    const presence = createClient(PresenceService, createConnectTransport({ baseUrl: hubs[2]!.url, httpVersion: "2" }));
    const ac = new AbortController();
    const frames = presence.watchPresence({}, { headers: watcher.headers, signal: ac.signal })[Symbol.asyncIterator]();
    expect((await frames.next()).value?.event.case).toBe("snapshot");
    const joined = await register(hubs[0]!.url, "newcomer");
    let frame = (await frames.next()).value;
    while (frame && !(frame.event.case === "agent" && frame.event.value.id === joined.id)) frame = (await frames.next()).value;
    expect(frame?.event.case === "agent" && frame.event.value.name).toBe("newcomer");
    ac.abort();
  });

  it("the operator's WatchOpenMessages on the second hub sees a message sent on the first and replied on the third, and resumes on the third", async () => {
    const asker = await register(hubs[0]!.url, "ops-asker");
    const answerer = await register(hubs[2]!.url, "ops-answerer");
    const opsOn = (i: number) => createClient(OpsService, createConnectTransport({ baseUrl: hubs[i]!.url, httpVersion: "2" }));
    const ac = new AbortController();
    const onSecond = opsOn(1).watchOpenMessages({ project: "p" }, { signal: ac.signal })[Symbol.asyncIterator]();
    const snap = (await onSecond.next()).value as WatchOpenMessagesResponse;
    expect(snap.event.case).toBe("snapshot");
    const next = async () => {
      let f = (await onSecond.next()).value as WatchOpenMessagesResponse;
      while (f.event.case === "keepAlive") f = (await onSecond.next()).value as WatchOpenMessagesResponse;
      return f;
    };
    const sent = (await (await post(hubs[0]!.url, "/v1/messages", asker.headers, { target: answerer.id, content: "?" })).json()) as {
      message: { id: string };
    };
    const queued = await next();
    expect(queued.event.case === "change" && [OpenMessageChangeKind[queued.event.value.kind], queued.event.value.message?.id]).toEqual([
      "SENT",
      sent.message.id,
    ]);
    expect(queued.cursor).toBe(snap.cursor + 1n);
    expect((await post(hubs[2]!.url, `/v1/messages/${sent.message.id}/reply`, answerer.headers, { content: "!" })).status).toBe(200);
    const ended = await next();
    expect(ended.event.case === "change" && OpenMessageChangeKind[ended.event.value.kind]).toBe("ENDED");
    ac.abort();

    const ac3 = new AbortController();
    const onThird = opsOn(2).watchOpenMessages({ project: "p", afterCursor: snap.cursor }, { signal: ac3.signal })[Symbol.asyncIterator]();
    const frames = [(await onThird.next()).value, (await onThird.next()).value, (await onThird.next()).value] as WatchOpenMessagesResponse[];
    expect(frames.map((f) => [f.event.case, f.cursor])).toEqual([
      ["keepAlive", snap.cursor],
      ["change", snap.cursor + 1n],
      ["change", snap.cursor + 2n],
    ]);
    ac3.abort();
  });
});

describe("hubs through failures", () => {
  let own: TestPostgres;
  let three: ServingCli[] = [];
  beforeAll(async () => {
    own = await startPostgres();
    const url = await own.createDatabase();
    for (let i = 0; i < 3; i++) three.push(await serveCli(["--port", "0", "--log-path", "-"], { env: { KXM_DATABASE_URL: url } }));
  }, 60_000);
  afterAll(async () => {
    await Promise.all(three.map((h) => h.stop()));
    three = [];
    await own?.stop();
  });

  /** Polls `/ready` on every hub until each answers `status` (no fixed sleep: a deadline). */
  async function allReady(status: number) {
    const deadline = performance.now() + 20_000;
    for (;;) {
      const got = await Promise.all(three.map(async (h) => (await fetch(`${h.url}/ready`).catch(() => undefined))?.status));
      if (got.every((s) => s === status)) return;
      if (performance.now() > deadline) throw new Error(`/ready answered ${got.join(", ")}, waiting for ${status}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  it("a SIGKILLed hub loses nothing the others answered; its agents carry on through them", async () => {
    const agents = await Promise.all(Array.from({ length: 12 }, (_, i) => register(three[i % 3]!.url, `worker-${i}`)));
    const recipient = await register(three[0]!.url, "inbox");
    const survivors = [three[0]!, three[2]!];
    /** Answered grants per lease name (token, holder), in answer order; answered message ids. */
    const grants = new Map<string, { token: number; holder: number }[]>();
    const sent: string[] = [];
    let killed = false;
    const hubFor = (i: number) => (killed ? survivors[i % 2]! : three[i % 3]!);
    const work = async (i: number, rounds: number) => {
      const a = agents[i]!;
      const name = `job-${i % 4}`;
      for (let r = 0; r < rounds; r++) {
        // A call to the hub being killed may fail: nothing it did not answer is counted.
        try {
          const res = await post(hubFor(i).url, `/v1/leases/${name}/acquire`, a.headers, { ttlMs: 60_000 });
          if (res.status === 200) {
            const token = ((await res.json()) as { lease: { fencingToken: number } }).lease.fencingToken;
            grants.set(name, [...(grants.get(name) ?? []), { token, holder: i }]);
            await post(hubFor(i).url, `/v1/leases/${name}/release`, a.headers, { fencingToken: token });
          }
          const msg = await post(hubFor(i).url, "/v1/messages", a.headers, { target: recipient.id, content: `from ${i} #${r}` });
          if (msg.status === 202) sent.push(((await msg.json()) as { message: { id: string } }).message.id);
        } catch {
          // the connection to the killed hub broke mid-call: unanswered
        }
      }
    };
    const load = Promise.all(agents.map((_, i) => work(i, 15)));
    await new Promise((r) => setTimeout(r, 150)); // let the load get going before the kill
    three[1]!.child.kill("SIGKILL");
    killed = true;
    await load;
    await Promise.all(agents.map((_, i) => work(i, 3))); // after the kill, through the survivors only

    // The fence: on every name, the answered tokens only ever grew, and the next grant, through a
    // hub that is left, is above every one of them.
    expect(grants.size).toBeGreaterThan(0);
    const late = await register(survivors[1]!.url, "late");
    for (const [name, answered] of grants) {
      // A token repeats only for its own holder: an agent whose release went to the killed hub
      // still holds the lease, and acquiring its own live lease again keeps the token.
      for (let k = 1; k < answered.length; k++) {
        const [prev, cur] = [answered[k - 1]!, answered[k]!];
        if (cur.token === prev.token) expect(cur.holder).toBe(prev.holder);
        else expect(cur.token).toBeGreaterThan(prev.token);
      }
      const tokens = answered.map((g) => g.token);
      const res = await post(survivors[0]!.url, `/v1/leases/${name}/acquire`, late.headers, { ttlMs: 60_000 });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { lease: { fencingToken: number } }).lease.fencingToken).toBeGreaterThan(tokens[tokens.length - 1]!);
    }
    // Every answered message is there, for its recipient, on either survivor.
    expect(sent.length).toBeGreaterThan(0);
    for (const [k, id] of sent.entries()) {
      const res = await fetch(`${survivors[k % 2]!.url}/v1/messages/${id}`, { headers: recipient.headers });
      expect(res.status).toBe(200);
    }
  });

  it("while PostgreSQL is down the hubs are not ready and refuse with store_unavailable; after, nothing answered is lost", async () => {
    const live = three.filter((h) => h.child.exitCode === null && h.child.signalCode === null);
    three = live;
    const a = await register(three[0]!.url, "holder");
    const before = await post(three[0]!.url, "/v1/leases/survivor/acquire", a.headers, { ttlMs: 600_000 });
    expect(before.status).toBe(200);
    const token = ((await before.json()) as { lease: { fencingToken: number } }).lease.fencingToken;

    own.stopServer("immediate");
    await allReady(503);
    const refused = await post(three[1]!.url, "/v1/leases/other/acquire", a.headers, { ttlMs: 1_000 });
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { code: string }).code).toBe("store_unavailable");

    own.startServer();
    await allReady(200);
    // The lease answered before the outage is still held, with its token, on every hub.
    for (const h of three) {
      const res = await fetch(`${h.url}/v1/leases/survivor`, { headers: a.headers });
      expect(((await res.json()) as { lease: { fencingToken: number; holderAgentId: string } }).lease).toMatchObject({
        fencingToken: token,
        holderAgentId: a.id,
      });
    }
    const after = await post(three[1]!.url, "/v1/leases/survivor/renew", a.headers, { fencingToken: token, ttlMs: 600_000 });
    expect(after.status).toBe(200);
  });
});
