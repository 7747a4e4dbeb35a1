import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { PeerService } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import { serveCli, type ServingCli } from "../fixtures/cli.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/**
 * Three `kxm-hub serve` processes on one PostgreSQL database, as an operator runs replicas: one
 * fence across them, and a message sent through one reaching a Subscribe stream on another.
 */

let server: TestPostgres;
let hubs: ServingCli[] = [];
beforeAll(async () => {
  server = await startPostgres();
  const url = await server.createDatabase();
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
});
