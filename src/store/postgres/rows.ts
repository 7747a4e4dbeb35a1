/** The columns of an AgentDb (../rows.ts); agents also has name_key and reg_seq, which rows never carry. */
export const agentColumns = "id, project, name, purpose, model, host, key_hash, connected_at, last_seen_at, online";
