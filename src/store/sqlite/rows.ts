import type { AgentRow } from "../store.js";

/** Row shapes shared by the SQLite store's parts. */
export interface AgentDb {
  id: string;
  project: string;
  name: string;
  purpose: string;
  model: string | null;
  host: string | null;
  key_hash: string;
  connected_at: number;
  last_seen_at: number;
  online: number;
}

export const agentFromDb = (r: AgentDb): AgentRow => ({
  id: r.id,
  project: r.project,
  name: r.name,
  purpose: r.purpose,
  ...(r.model !== null && { model: r.model }),
  ...(r.host !== null && { host: r.host }),
  keyHash: r.key_hash,
  connectedAtMs: r.connected_at,
  lastSeenAtMs: r.last_seen_at,
  online: r.online === 1,
});
