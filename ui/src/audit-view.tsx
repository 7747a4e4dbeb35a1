// The Audit view (admin): the hub's audit trail, newest first, a page at a time (ListAuditEvents):
// tokens created, revoked and expired, restores, fence raises, and the security alerts, which
// stand out. Not a stream: read when the view opens, on Refresh, and page by page with Older.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { AuditKind, type AuditEvent } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import "./admin.css";
import { nameOf, when } from "./format.js";
import { msOf } from "./live.js";
import { adminRefusalText, clientsFor, type Session } from "./session.js";
import { Empty } from "./views.js";

/** Entries per page. */
export const auditPageSize = 50;

/** The kinds that are security alerts: marked in red, and counted above the table. */
const alertKinds = new Set([AuditKind.SYNC_CONFLICT, AuditKind.AUTH_REFUSALS]);

/** A badge's look per kind: alerts bad, changes to who may call or to the store's history a warning. */
const kindLook = (k: AuditKind) =>
  alertKinds.has(k) ? "kind-alert" : k === AuditKind.TOKEN_CREATED ? "kind-info" : "kind-change";

/** The facts of an entry as key=value, by key. */
function Detail({ detail }: { detail: Record<string, string> }) {
  const keys = Object.keys(detail).sort();
  if (keys.length === 0) return null;
  return (
    <span class="kvs">
      {keys.map((k) => {
        const v = detail[k]!;
        // An instant in milliseconds (expiresAtMs) reads as one, its number kept in the title.
        const at = /AtMs$/.test(k) && /^\d{1,16}$/.test(v);
        return (
          <span class="kv" data-key={k} title={at ? `${k}=${v}` : undefined}>
            {at ? `${k.slice(0, -2)}=${when(Number(v))}` : `${k}=${v}`}
          </span>
        );
      })}
    </span>
  );
}

function AuditLine({ e }: { e: AuditEvent }) {
  const kind = nameOf(AuditKind, e.kind);
  const alert = alertKinds.has(e.kind);
  return (
    <tr data-seq={String(e.seq)} data-kind={kind} class={alert ? "security" : undefined}>
      <td data-label="When" class="num">
        {when(msOf(e.at))}
      </td>
      <td data-label="Kind">
        <span class={`badge ${kindLook(e.kind)}`}>{kind}</span>
        {alert && <span class="sr-only"> (security alert)</span>}
      </td>
      <td data-label="Project">{e.project || <span class="dim">whole hub</span>}</td>
      <td data-label="Detail" class="wrap">
        <Detail detail={e.detail} />
      </td>
    </tr>
  );
}

type Scope = "project" | "all";

/**
 * The trail, for the admin. `project` is the project the page shows: the view offers its
 * entries or every entry; without one (the hub-wide page) it shows every entry.
 */
export function AuditView({ session, project }: { session: Session; project?: string }) {
  const ops = useMemo(() => clientsFor(session.token).ops, [session.token]);
  const [scope, setScope] = useState<Scope>(project ? "project" : "all");
  const [events, setEvents] = useState<AuditEvent[] | undefined>();
  const [next, setNext] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();
  /** Counts the reads: an answer to one the operator has since replaced is dropped. */
  const reads = useRef(0);
  const live = useMemo(() => new AbortController(), []);
  useEffect(() => () => live.abort(), [live]);

  const read = async (older: boolean) => {
    const n = ++reads.current;
    setBusy(true);
    try {
      const r = await ops.listAuditEvents(
        { project: scope === "project" ? project : "", pageSize: auditPageSize, pageToken: older ? next : "" },
        { signal: live.signal },
      );
      if (n !== reads.current) return;
      setEvents((had) => {
        if (!older || !had) return r.events;
        const seen = new Set(had.map((e) => e.seq));
        return [...had, ...r.events.filter((e) => !seen.has(e.seq))];
      });
      setNext(r.nextPageToken);
      setError(undefined);
    } catch (e) {
      if (n !== reads.current || live.signal.aborted) return;
      setError(adminRefusalText(e, session, "read the audit trail"));
      if (!older) setEvents(undefined);
    } finally {
      if (n === reads.current) setBusy(false);
    }
  };
  useEffect(() => {
    setEvents(undefined);
    setNext("");
    void read(false);
  }, [scope, ops]);

  const alerts = events?.filter((e) => alertKinds.has(e.kind)).length ?? 0;
  /** The hub refused the trail (a project's token): the refusal, and nothing to filter. */
  const refused = error !== undefined && events === undefined;
  return (
    <section aria-labelledby="audit-title" aria-busy={busy}>
      <h2 id="audit-title">Audit trail</h2>
      <div class="toolbar">
        {project && !refused && (
          <label>
            Show{" "}
            <select id="audit-scope" value={scope} onChange={(e) => setScope(e.currentTarget.value as Scope)}>
              <option value="project">{project} only</option>
              <option value="all">all projects and the whole hub</option>
            </select>
          </label>
        )}
        <button type="button" id="audit-refresh" class="quiet small" disabled={busy} onClick={() => void read(false)}>
          {busy && events === undefined ? "Reading…" : refused ? "Try again" : "Refresh"}
        </button>
      </div>
      <p class="hint" hidden={refused}>
        Newest first: project tokens created, revoked and expired, restores, fence raises, and security alerts (sync conflicts, bursts of
        refused authentication).{scope === "project" && " Entries about the whole hub (restores, fence raises, refused authentication) are listed under all projects."}
      </p>
      {error && (
        <p id="audit-error" class="error" role="alert">
          {error}
        </p>
      )}
      {events === undefined ? (
        !error && <Empty>Reading the audit trail…</Empty>
      ) : events.length === 0 ? (
        <Empty>{scope === "project" ? `No audit entry for ${project}.` : "The audit trail is empty."}</Empty>
      ) : (
        <>
          {alerts > 0 && (
            <p id="audit-alerts" class="alert-line" role="status">
              {alerts === 1 ? "1 security alert" : `${alerts} security alerts`} among the entries shown.
            </p>
          )}
          <table class="grid audit">
            <thead>
              <tr>
                <th>When (UTC)</th>
                <th>Kind</th>
                <th>Project</th>
                <th>Detail</th>
              </tr>
            </thead>
            <tbody>
              {events.map((e) => (
                <AuditLine key={String(e.seq)} e={e} />
              ))}
            </tbody>
          </table>
          <p class="pager">
            <span class="hint">
              {events.length} {events.length === 1 ? "entry" : "entries"} shown{next ? "; older ones remain." : ", back to the oldest the hub keeps."}
            </span>
            {next && (
              <button type="button" id="audit-older" class="quiet small" disabled={busy} onClick={() => void read(true)}>
                {busy ? "Reading…" : "Older entries"}
              </button>
            )}
          </p>
        </>
      )}
    </section>
  );
}
