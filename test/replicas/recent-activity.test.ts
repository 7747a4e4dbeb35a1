import { afterAll, beforeAll, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { FakeClock } from "../fixtures/fake-clock.js";
import { startTestHub, type TestHub } from "../fixtures/hub.js";
import { sqlRows, startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/**
 * A hub on PostgreSQL authenticates a send on the agent's row as it read it lately (D86). When
 * that row says the agent was last seen more than a second ago but the database says otherwise
 * (another hub recorded its activity since, or the read was answered after this hub's own write),
 * the call's activity decision finds nothing to write, and the row it read, committed, stands for
 * the one read lately: the next calls cost no decision. An online agent's activity is decided on
 * that row outside the project's batches (D87); when the database has the agent offline, that
 * finds the row moved on, and the decision on the latest row brings it back with its change. Two
 * hubs on one database, one clock.
 */

let server: TestPostgres;
let url: string;
let clock: FakeClock;
let one: TestHub;
let other: TestHub;
let otherStore: PostgresStore;

beforeAll(async () => {
  server = await startPostgres();
  url = await server.createDatabase();
  clock = new FakeClock(Date.now());
  one = await startTestHub({ clock, overrides: { store: await PostgresStore.open({ url, clock }) } });
  otherStore = await PostgresStore.open({ url, clock });
  other = await startTestHub({ clock, overrides: { store: otherStore } });
}, 60_000);
afterAll(async () => {
  await one?.close();
  await other?.close();
  await server?.stop();
});

/** Rows of a query on the database both hubs share. */
const sql = (query: string, values: unknown[] = []) => sqlRows(url, query, values);

const lastSeen = async (id: string) => Number((await sql("SELECT last_seen_at FROM agents WHERE id = $1", [id]))[0]!.last_seen_at);

it("an agent's row read lately, older than what the database holds, costs one activity decision, not one per call", async () => {
  const sender = await one.register("sender", "activity");
  const inbox = await one.register("inbox", "activity");
  const registeredAt = clock.now();
  const send = async () => expect((await other.rest("/v1/messages", { json: { target: inbox.id, content: "hi" }, headers: sender.headers })).status).toBe(202);

  // The other hub reads the sender's row (last seen at registration) and keeps it for a second.
  clock.advance(900);
  await send();
  // The first hub records the sender's activity meanwhile: the database's row moves on.
  clock.advance(200);
  const beat = await one.rest(`/v1/agents/${sender.id}/heartbeat`, { json: {}, headers: sender.headers });
  expect(beat.status).toBe(200);
  const seenAt = await lastSeen(sender.id);
  expect(seenAt).toBe(registeredAt + 1_100);

  const decisions: string[] = [];
  const decideAgent = otherStore.agents.decideAgent.bind(otherStore.agents);
  otherStore.agents.decideAgent = (id, decide, project) => {
    decisions.push(id);
    return decideAgent(id, decide, project);
  };
  clock.advance(100);
  // The row read lately says last seen 1.2 s ago: the first send decides, and writes nothing.
  await send();
  expect(decisions).toEqual([sender.id]);
  expect(await lastSeen(sender.id)).toBe(seenAt);
  // The next ones are authenticated on the row that decision read.
  await send();
  await send();
  expect(decisions).toEqual([sender.id]);
  expect(await lastSeen(sender.id)).toBe(seenAt);
}, 30_000);

it("an agent its row read lately says online, that the database has offline, comes back online with its change (D87)", async () => {
  const agent = await one.register("returning", "revival");
  const inbox = await one.register("its-inbox", "revival");
  const send = async () => expect((await other.rest("/v1/messages", { json: { target: inbox.id, content: "hi" }, headers: agent.headers })).status).toBe(202);
  const presenceChanges = async () => Number((await sql("SELECT count(*) AS n FROM watch_changes WHERE project = 'revival' AND stream = 'presence'"))[0]!.n);

  // The other hub reads the agent's row (online) and keeps it for a second.
  clock.advance(500);
  await send();
  // The agent goes offline in the database meanwhile, as another replica's sweep would leave it.
  await sql("UPDATE agents SET online = false WHERE id = $1", [agent.id]);
  const before = await presenceChanges();

  // The row read lately says online and last seen over a second ago: its activity, decided on
  // that row, finds the row moved on; decided on the latest, it brings the agent back, a change.
  clock.advance(600);
  await send();
  const [row] = await sql("SELECT online, last_seen_at FROM agents WHERE id = $1", [agent.id]);
  expect(row).toEqual({ online: true, last_seen_at: String(clock.now()) });
  expect(await presenceChanges()).toBe(before + 1);
}, 30_000);
