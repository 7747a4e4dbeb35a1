import pg from "pg";
import { startPostgres } from "./test/fixtures/postgres.js";
import { migrate } from "./src/store/postgres/schema.js";
import { agentColumns, leaseColumns, waiterColumns } from "./src/store/postgres/rows.js";
const p = await startPostgres({});
try {
  const url = await p.createDatabase();
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await (migrate as any)(c);
  const n = Number(process.env.N ?? 20000);
  await c.query(`INSERT INTO agents (id, project, name, name_key, purpose, model, host, key_hash, connected_at, last_seen_at, online) SELECT 'agt_' || i, 'proj' || (i % 10), 'w' || i, 'w' || i, 'p', 'm', 'h', 'k', 0, 0, true FROM generate_series(0, $1::int - 1) i`, [n]);
  await c.query(`INSERT INTO leases (project, name, holder_agent_id, holder_agent_name, fencing_token, acquired_at, expires_at) SELECT 'proj' || (i % 10), 'l' || i, NULL, NULL, 1, 0, 0 FROM generate_series(0, $1::int - 1) i`, [n]).catch((e) => console.log(e.message));
  if (process.env.AN === "1") await c.query("ANALYZE");
  const loadSegment = `WITH a AS (SELECT ${agentColumns} FROM agents WHERE id = ANY($3::text[]) ORDER BY id FOR SHARE),
    l AS (SELECT ${leaseColumns} FROM leases WHERE project = $1 AND name = ANY($2::text[]) ORDER BY name FOR UPDATE)
  SELECT (SELECT coalesce(json_agg(a), '[]') FROM a) AS agents,
    (SELECT coalesce(json_agg(l), '[]') FROM l) AS leases,
    (SELECT coalesce(json_agg(w ORDER BY w.name, w.seq), '[]') FROM (SELECT ${waiterColumns} FROM lease_waiters WHERE project = $1 AND name = ANY($2::text[])) w) AS waiters,
    (SELECT floor FROM fence_base WHERE id = 1) AS floor`;
  for (let i = 0; i < 300; i++) {
    const k = 1 + (i % 16);
    await c.query("BEGIN");
    await c.query({ name: "seg", text: loadSegment, values: [`proj${i % 10}`, Array.from({ length: k }, (_, j) => `l${(i + j * 10) % n}`), Array.from({ length: k }, (_, j) => `agt_${(i + j) % n}`)] });
    await c.query("COMMIT");
  }
  console.log(process.env.N, process.env.AN, (await c.query("SELECT name, generic_plans, custom_plans FROM pg_prepared_statements ORDER BY name")).rows);
  await c.end();
} finally {
  await p.stop();
}
