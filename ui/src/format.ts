// How the page writes times (spans and countdowns on the hub clock, instants in UTC) and the
// API's enum values.

/** An enum value as the REST face names it: TokenScope.READ is "read", AuditKind.TOKEN_CREATED "token_created". */
export const nameOf = (e: Record<number, string>, value: number) => e[value]?.toLowerCase() ?? "unknown";

/** "4 s", "12 min", "3 h", "2 d". */
export function span(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

/** Time left as m:ss (h:mm:ss past an hour). */
export function countdown(ms: number): string {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = String(s % 60).padStart(2, "0");
  return h > 0 ? `${h}:${String(m).padStart(2, "0")}:${sec}` : `${m}:${sec}`;
}

/** An instant in full, UTC: "2026-01-01 12:00:05Z". */
export const when = (ms: number | undefined) => (ms === undefined ? "" : new Date(ms).toISOString().replace("T", " ").slice(0, 19) + "Z");

/** An instant as a wall clock reads it, in the browser's time zone: "12:00:05". */
export function clockTime(ms: number): string {
  const d = new Date(ms);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}
