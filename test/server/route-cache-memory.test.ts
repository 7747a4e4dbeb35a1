// What the REST face keeps of the paths it routed (src/transcode/http-rules.ts matchRestRoute):
// at most 4,096 matches, and none of a request target over 512 characters. A path is a slice of
// its target, and V8 keeps a sliced string's parent alive, so a kept match of a short path with
// a long query would keep the query: 15 KB a request over HTTP/1.1, 64 KB over h2c (an external
// string), whatever its caller is allowed to do (these are all refused, 401). Nor does what the
// hub keeps of a call's names: the SQLite store keeps the rows of the leases it decided.
import http2 from "node:http2";
import v8 from "node:v8";
import vm from "node:vm";
import { afterEach, expect, test } from "vitest";
import { startTestHub, type TestHub } from "../fixtures/hub.js";

v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;
const heap = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};
/** The V8 heap and the memory outside it that strings hold (HTTP/2 header values are external strings). */
const heapAndExternal = () => {
  gc();
  gc();
  const m = process.memoryUsage();
  return m.heapUsed + m.external;
};
const MiB = 1024 * 1024;

let hub: TestHub | undefined;
afterEach(async () => {
  await hub?.close();
  hub = undefined;
});

async function pool(n: number, width: number, job: (i: number) => Promise<void>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      for (let i = next++; i < n; i = next++) await job(i);
    }),
  );
}

test("HTTP/1.1: 4,000 GETs with distinct lease names and a 15 KB query keep less than 16 MiB alive once answered", async () => {
  hub = await startTestHub();
  const pad = "q=" + "x".repeat(15_000);
  // Warm-up and control: one path (one cache entry), distinct queries.
  await pool(1000, 8, async (i) => void (await (await hub!.rest(`/v1/leases/same?${pad}${i}`)).arrayBuffer()));
  hub.events.length = 0;
  const base = heap();
  await pool(4000, 8, async (i) => void (await (await hub!.rest(`/v1/leases/same?${pad}${i}`)).arrayBuffer()));
  hub.events.length = 0;
  const control = (heap() - base) / MiB;
  const before = heap();
  // 4,000 distinct paths: under the 4,096 at which the cache empties itself.
  await pool(4000, 8, async (i) => {
    const res = await hub!.rest(`/v1/leases/l${String(i).padStart(6, "0")}?${pad}${i}`);
    expect(res.status).toBe(401);
    await res.arrayBuffer();
  });
  hub.events.length = 0;
  const grown = (heap() - before) / MiB;
    expect(control).toBeLessThan(16);
  expect(grown).toBeLessThan(16);
}, 120_000);

test("h2c: 2,000 GETs with distinct lease names and a 60 KB query keep less than 16 MiB alive once answered", async () => {
  hub = await startTestHub();
  const session = http2.connect(hub.baseUrl);
  const pad = "q=" + "x".repeat(60_000);
  const get = (path: string) =>
    new Promise<number>((resolve, reject) => {
      const r = session.request({ ":path": path });
      r.on("response", (h) => resolve(Number(h[":status"])));
      r.on("error", reject);
      r.resume();
      r.end();
    });
  try {
    await pool(200, 8, async (i) => void (await get(`/v1/leases/same?${pad}${i}`)));
    hub.events.length = 0;
    const before = heapAndExternal();
    await pool(2000, 8, async (i) => expect(await get(`/v1/leases/l${String(i).padStart(6, "0")}?${pad}${i}`)).toBe(401));
    hub.events.length = 0;
    const grown = (heapAndExternal() - before) / MiB;
    expect(grown).toBeLessThan(16);
  } finally {
    session.close();
  }
}, 180_000);

test("HTTP/1.1: 2,000 leases acquired by names under a 15 KB query keep less than 16 MiB alive once released", async () => {
  hub = await startTestHub();
  const agent = await hub.register("holder", "memory");
  const pad = "q=" + "x".repeat(15_000);
  const cycle = async (name: string, i: number) => {
    const acquired = await hub!.rest(`/v1/leases/${name}/acquire?${pad}${i}`, { json: { ttlMs: 60_000 }, headers: agent.headers });
    expect(acquired.status).toBe(200);
    const { lease } = (await acquired.json()) as { lease: { fencingToken: number } };
    const released = await hub!.rest(`/v1/leases/${name}/release?${pad}${i}`, { json: { fencingToken: lease.fencingToken }, headers: agent.headers });
    expect(released.status).toBe(200);
    await released.arrayBuffer();
  };
  await pool(200, 8, (i) => cycle(`warm-up-${i}`, i));
  hub.events.length = 0;
  const before = heap();
  await pool(2000, 8, (i) => cycle(`lease-name-${String(i).padStart(6, "0")}`, i));
  hub.events.length = 0;
  expect((heap() - before) / MiB).toBeLessThan(16);
}, 180_000);
