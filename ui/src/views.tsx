// The views: plain tables (cards in a narrow window), one per stream, read from the model.
import { Delivery, MessageStatus } from "../../gen/ts/kxm/hub/v1/peer_pb.js";
import type { ProjectSummary } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { PresenceState } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import { RowAction, type OperatorHands } from "./actions.js";
import { countdown, span, when } from "./format.js";
import { msOf } from "./live.js";
import type { ProjectModel, RuntimeRow } from "./model.js";

export function Empty({ children }: { children: string }) {
  return <p class="empty">{children}</p>;
}

export function ProjectsView({ rows }: { rows: ProjectSummary[] | undefined }) {
  if (!rows) return <Empty>Loading projects…</Empty>;
  if (rows.length === 0) return <Empty>No project yet: the hub lists a project once it has an agent, a lease, a runtime or a run.</Empty>;
  return (
    <section aria-labelledby="projects-title">
      <h2 id="projects-title">Projects</h2>
      <table class="grid">
        <thead>
          <tr>
            <th>Project</th>
            <th>Agents online</th>
            <th>Leases held</th>
            <th>Messages open</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((p) => (
            <tr data-project={p.project}>
              <td data-label="Project">
                <a href={`#/p/${encodeURIComponent(p.project)}/agents`}>{p.project}</a>
                {p.hasToken && <span class="tag">own token</span>}
              </td>
              <td data-label="Agents online">
                {p.onlineAgents} <span class="dim">of {p.agents}</span>
              </td>
              <td data-label="Leases held">{p.heldLeases}</td>
              <td data-label="Messages open">{p.openMessages}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

const presenceName: Record<PresenceState, string> = {
  [PresenceState.UNSPECIFIED]: "unknown",
  [PresenceState.ONLINE]: "online",
  [PresenceState.STALE]: "stale",
  [PresenceState.OFFLINE]: "offline",
};

export function AgentsView({ model, hands }: { model: ProjectModel; hands: OperatorHands }) {
  const now = model.clock.now();
  const rank = { online: 0, stale: 1, offline: 2, unknown: 3 } as Record<string, number>;
  const agents = [...model.agents.values()].sort(
    (a, b) => rank[presenceName[a.presence]]! - rank[presenceName[b.presence]]! || a.name.localeCompare(b.name),
  );
  if (agents.length === 0) return <Empty>No agent has registered in this project.</Empty>;
  return (
    <section aria-labelledby="agents-title">
      <h2 id="agents-title">Agents</h2>
      <table class="grid">
        <thead>
          <tr>
            <th>Name</th>
            <th>State</th>
            <th>Last seen</th>
            <th>Host</th>
            <th>Purpose</th>
            <th>
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {agents.map((a) => {
            const state = presenceName[a.presence];
            const seen = msOf(a.lastSeenAt);
            return (
              <tr data-agent={a.name} data-state={state} class={`state-${state}`}>
                <td data-label="Name">
                  <strong>{a.name}</strong>
                  {a.model && <span class="dim"> · {a.model}</span>}
                </td>
                <td data-label="State">
                  <span class={`badge state-${state}`}>{state}</span>
                </td>
                <td data-label="Last seen" title={when(seen)}>
                  {seen === undefined ? "" : `${span(now - seen)} ago`}
                </td>
                <td data-label="Host">{a.host ?? ""}</td>
                <td data-label="Purpose" class="wrap">
                  {a.purpose}
                </td>
                <td data-label="" class="actions">
                  {state !== "offline" && <RowAction action="evict" label={`Evict ${a.name}`} hands={hands} onClick={() => hands.evict(a)} />}
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </section>
  );
}

const statusName = (s: MessageStatus) => MessageStatus[s]?.toLowerCase() ?? "unknown";
const deliveryName = (d: Delivery) => Delivery[d]?.toLowerCase().replace("_", " ") ?? "";

export function MessagesView({ model }: { model: ProjectModel }) {
  const now = model.clock.now();
  const rows = [...model.messages.values()].sort((a, b) => (msOf(b.message.createdAt) ?? 0) - (msOf(a.message.createdAt) ?? 0));
  const shown = rows.filter((r) => r.endedAt === undefined).length;
  return (
    <section aria-labelledby="messages-title">
      <h2 id="messages-title">
        Open messages <span class="count">{model.messageTotal}</span>
      </h2>
      {model.messageTotal > shown && <p class="hint">The newest {shown} of {model.messageTotal} are listed.</p>}
      {rows.length === 0 ? (
        <Empty>No message is waiting for a reply.</Empty>
      ) : (
        <table class="grid">
          <thead>
            <tr>
              <th>From → to</th>
              <th>Status</th>
              <th>Age</th>
              <th>TTL left</th>
              <th>Delivery</th>
            </tr>
          </thead>
          <tbody>
            {rows.map(({ message: m, endedAt }) => {
              const status = statusName(m.status);
              return (
                <tr data-message={m.id} data-status={status} class={endedAt === undefined ? `status-${status}` : "ended"}>
                  <td data-label="From → to">
                    <bdi>{m.fromName}</bdi> → <bdi>{m.toName}</bdi>
                    {m.correlationId && <span class="dim"> · {m.correlationId}</span>}
                  </td>
                  <td data-label="Status">
                    <span class={`badge status-${status}`}>{status}</span>
                  </td>
                  <td data-label="Age">{span(now - (msOf(m.createdAt) ?? now))}</td>
                  <td data-label="TTL left" class="num">
                    {endedAt === undefined ? countdown((msOf(m.expiresAt) ?? now) - now) : ""}
                  </td>
                  <td data-label="Delivery">{deliveryName(m.delivery)}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}

function RuntimeSection({ model, r }: { model: ProjectModel; r: RuntimeRow }) {
  const online = model.runtimeOnline(r);
  const runs = [...r.runs.values()].sort((a, b) => (b.updatedAt ?? "").localeCompare(a.updatedAt ?? ""));
  return (
    <section class={`runtime${online ? "" : " orphaned"}`} data-runtime={r.runtimeId} data-presence={online ? "online" : "lapsed"}>
      <h3>
        {r.runtimeId}
        {r.host && <span class="dim"> · {r.host}</span>}
        <span class={`badge ${online ? "state-online" : "state-orphaned"}`}>{online ? "online" : "presence lapsed"}</span>
      </h3>
      {runs.length === 0 ? (
        <Empty>No run.</Empty>
      ) : (
        <table class="grid">
          <thead>
            <tr>
              <th>Title</th>
              <th>Status</th>
              <th>Cursor</th>
              <th>Updated</th>
            </tr>
          </thead>
          <tbody>
            {runs.map((run) => (
              <tr data-run={run.runId} data-orphaned={String(!online)} class={online ? "" : "orphaned"}>
                <td data-label="Title">
                  <strong>{run.displayTitle ?? run.runId}</strong>
                  <span class="dim"> · {run.runId}</span>
                  {run.workflowId && <span class="dim"> · {run.workflowId}</span>}
                  {!online && <span class="tag orphan">orphaned</span>}
                </td>
                <td data-label="Status">{run.status ?? ""}</td>
                <td data-label="Cursor" class="num">
                  {String(run.lastSequence)}
                  {run.pendingGap && (
                    <span class="tag gap" title="Later events are stored; one before them is missing">
                      gap
                    </span>
                  )}
                </td>
                <td data-label="Updated">{run.updatedAt ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {r.runTotal > runs.length && <p class="hint">The newest {runs.length} of {r.runTotal} runs are listed.</p>}
    </section>
  );
}

export function RunsView({ model }: { model: ProjectModel }) {
  const runtimes = [...model.runtimes.values()].sort((a, b) => a.runtimeId.localeCompare(b.runtimeId));
  if (runtimes.length === 0) return <Empty>No runtime has reported to this project.</Empty>;
  return (
    <section aria-labelledby="runs-title">
      <h2 id="runs-title">Runs by home runtime</h2>
      {runtimes.map((r) => (
        <RuntimeSection model={model} r={r} />
      ))}
    </section>
  );
}

export function AlertsView({ model }: { model: ProjectModel }) {
  return (
    <section aria-labelledby="alerts-title">
      <h2 id="alerts-title">Security alerts</h2>
      <p class="hint">Pushes the hub refused as conflicts since this page opened: a sequence reused with other content, a project id owned elsewhere, a run claimed by another runtime.</p>
      {model.alerts.length === 0 ? (
        <Empty>No alert.</Empty>
      ) : (
        <table class="grid">
          <thead>
            <tr>
              <th>When</th>
              <th>Alert</th>
              <th>Runtime</th>
              <th>Run</th>
              <th>Sequence</th>
            </tr>
          </thead>
          <tbody>
            {model.alerts.map((a) => (
              <tr data-alert={a.code} class="alert">
                <td data-label="When">{when(msOf(a.at))}</td>
                <td data-label="Alert">
                  <span class="badge state-orphaned">{a.code}</span>
                </td>
                <td data-label="Runtime">{a.runtimeId}</td>
                <td data-label="Run">
                  {a.projectId} / {a.runId}
                </td>
                <td data-label="Sequence" class="num">
                  {String(a.sequence)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
