import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createClient } from "@connectrpc/connect";
import { LeaseService, type WatchLeasesResponse } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { PostgresStore } from "../../src/store/postgres/postgres-store.js";
import { protocols, withHeaders } from "../fixtures/clients.js";
import { startTestHub } from "../fixtures/hub.js";
import { startPostgres, type TestPostgres } from "../fixtures/postgres.js";

/**
 * A hub looks for what the other hubs commit often only while someone on it listens (a stream,
 * a waiting call); with nobody listening it looks seldom. Someone starting to listen is what
 * makes it look again at once: here the idle hub's next look by itself is an hour away.
 */

let server: TestPostgres;
beforeAll(async () => {
  server = await startPostgres();
});
afterAll(() => server?.stop());

describe("a hub's tail of the other hubs' commits", () => {
  it("a watcher opened on a hub nobody listened to sees a grant made on another hub", async () => {
    const url = await server.createDatabase();
    await using a = await startTestHub({ overrides: { store: await PostgresStore.open({ url }) } });
    await using b = await startTestHub({ overrides: { store: await PostgresStore.open({ url, tailIdleMs: 3_600_000 }) } });
    const holder = await a.register("holder");
    const watcher = await b.register("watcher");
    const ac = new AbortController();
    const leases = createClient(LeaseService, protocols[1].make(b.baseUrl, [withHeaders(watcher.headers)]));
    const frames = leases.watchLeases({}, { signal: ac.signal })[Symbol.asyncIterator]();
    try {
      expect(((await frames.next()).value as WatchLeasesResponse).event.case).toBe("snapshot");
      const granted = await a.rest("/v1/leases/deploy/acquire", { json: { ttlMs: 60_000 }, headers: holder.headers });
      expect(granted.status).toBe(200);
      const seen = (await frames.next()).value as WatchLeasesResponse;
      expect(seen.event.case === "change" && seen.event.value.lease?.holderAgentName).toBe("holder");
    } finally {
      ac.abort();
    }
  });
});
