// One stand-in hub of bench/replicas/lock-order.ts: its clients cycle acquire + release, each on a
// lease name of its own, and their decisions run in batches, one batch at a time, on a pipelined
// pool, as the PostgreSQL store's group commit runs them. Environment: URL, DESIGN, CLIENTS, BASE
// (its first name), SECONDS, ID, SPIN_US (CPU spent per decision before it is queued, standing in
// for a hub's request path). Writes one JSON line: { cycles, batches, decisions }.
import pg from "pg";

const env = process.env;
const design = env.DESIGN;
const spinUs = Number(env.SPIN_US ?? 0);
const pool = new pg.Pool({ connectionString: env.URL, max: 4, pipeline: true });

/** The batch's writes: the lease rows, then the heads moved and the changes numbered from them. */
const writeNumbered = `WITH u AS (UPDATE leases l SET holder = v.holder, token = v.token
    FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(name, holder, token) WHERE l.name = v.name),
  h AS (UPDATE heads SET head = head + $4 WHERE project = 'p' RETURNING head)
  INSERT INTO changes (project, seq, body) SELECT 'p', h.head - $4 + x.o, x.b FROM h, unnest($5::text[]) WITH ORDINALITY AS x(b, o)`;
/** The same with the changes numbered by a sequence: nothing serialises the commits. */
const writeSequenced = `WITH u AS (UPDATE leases l SET holder = v.holder, token = v.token
    FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(name, holder, token) WHERE l.name = v.name)
  INSERT INTO changes (project, seq, body) SELECT 'p', nextval('change_numbers'), x.b FROM unnest($4::text[]) AS x(b)`;

const queue = [];
let inFlight = false;
/** Whether the batch in flight has taken its works (until then, what is queued joins it). */
let taken = false;
/**
 * heads: the next batch's transaction, begun with the head locked while this hub's batch before
 * it commits (D84): its lock waits in the database and is granted with that COMMIT.
 */
let ahead;

function openHeads() {
  return (async () => {
    const c = await pool.connect();
    await Promise.all([c.query("BEGIN"), c.query({ name: "heads", text: "SELECT head FROM heads WHERE project = 'p' FOR UPDATE" })]);
    return c;
  })();
}

function prepareNext() {
  if (design === "heads" && inFlight && taken && ahead === undefined && queue.length > 0) ahead = openHeads();
}
let batches = 0;
let decisions = 0;

async function flush() {
  if (inFlight || queue.length === 0) return;
  inFlight = true;
  taken = false;
  const c = design === "heads" ? await (ahead ?? openHeads()) : await pool.connect();
  ahead = undefined;
  try {
    let works;
    let rows;
    if (design === "heads") {
      // As the store runs a batch today (D55, D84): the heads locked first (ahead of time when
      // works wait), the works taken once they are held, the rows read, then the writes with the
      // COMMIT. Three round trips while the head is held.
      works = queue.splice(0, 64);
      taken = true;
      prepareNext();
      const names = works.map((w) => w.name);
      rows = (await c.query({ name: "read", text: "SELECT name, holder, token FROM leases WHERE name = ANY($1)", values: [names] })).rows;
    } else {
      // The rows locked first, in name order; the heads (if any) only by the last write, sent with
      // the COMMIT: the lock is held for that statement and the commit's flush, no round trip.
      works = queue.splice(0, 64);
      taken = true;
      const names = [...new Set(works.map((w) => w.name))].sort();
      const [, read] = await Promise.all([
        c.query("BEGIN"),
        c.query({ name: "read-locked", text: "SELECT name, holder, token FROM leases WHERE name = ANY($1) ORDER BY name FOR UPDATE", values: [names] }),
      ]);
      rows = read.rows;
    }
    const state = new Map(rows.map((r) => [r.name, { holder: r.holder, token: Number(r.token) }]));
    const bodies = [];
    for (const w of works) {
      const s = state.get(w.name);
      if (w.op === "acquire" && s.holder === null) {
        s.holder = w.who;
        s.token++;
        bodies.push(JSON.stringify({ acquired: w.name, token: s.token }));
        w.ok = true;
      } else if (w.op === "release" && s.holder === w.who) {
        s.holder = null;
        bodies.push(JSON.stringify({ released: w.name }));
        w.ok = true;
      }
    }
    const names = [...state.keys()];
    const rowValues = [names, names.map((n) => state.get(n).holder), names.map((n) => state.get(n).token)];
    const write =
      design === "sequence"
        ? { name: "write", text: writeSequenced, values: [...rowValues, bodies] }
        : { name: "write", text: writeNumbered, values: [...rowValues, bodies.length, bodies] };
    await Promise.all([c.query(write), c.query("COMMIT")]);
    batches++;
    decisions += works.length;
    for (const w of works) w.resolve(w.ok === true);
  } finally {
    c.release();
    inFlight = false;
    if (queue.length > 0) setImmediate(() => flush().catch(fail));
  }
}

function spin() {
  const end = performance.now() + spinUs / 1_000;
  while (performance.now() < end);
}

function decide(name, op, who) {
  if (spinUs > 0) spin();
  return new Promise((resolve) => {
    queue.push({ name, op, who, resolve });
    if (!inFlight) setImmediate(() => flush().catch(fail));
    else prepareNext();
  });
}

function fail(e) {
  console.error(`lock-order worker ${env.ID}: ${e.message}`);
  process.exit(1);
}

const warmupMs = 1_000;
const start = performance.now();
const end = start + warmupMs + Number(env.SECONDS) * 1_000;
let cycles = 0;
await Promise.all(
  Array.from({ length: Number(env.CLIENTS) }, async (_, i) => {
    const name = `l${Number(env.BASE) + i}`;
    const who = `${env.ID}-${i}`;
    while (performance.now() < end) {
      if (!(await decide(name, "acquire", who))) throw new Error(`${name} was not free`);
      if (!(await decide(name, "release", who))) throw new Error(`${name} was not held by ${who}`);
      if (performance.now() - start > warmupMs) cycles++;
    }
  }),
).catch(fail);
process.stdout.write(`${JSON.stringify({ cycles, batches, decisions })}\n`);
await pool.end();
