// The Leases view: each lease with its holder, fencing token, time left and the agents waiting
// for it (first in line first), all on the hub clock; and the operator's Release per lease.
import type { Lease } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { RowAction, type OperatorHands } from "./actions.js";
import { countdown, span, when } from "./format.js";
import { msOf } from "./live.js";
import { leaseEnded, type LeaseRow, type ProjectModel } from "./model.js";
import { Empty } from "./views.js";

function Waiters({ model, lease, now }: { model: ProjectModel; lease: Lease; now: number }) {
  const waiters = model.waiters(lease);
  if (waiters.length === 0) return <span class="dim">none</span>;
  return (
    <ol class="waiters">
      {waiters.map((w) => {
        const since = msOf(w.since) ?? now;
        const until = msOf(w.waitUntil);
        return (
          <li data-waiter={w.agentName} title={`waiting since ${when(since)}${until === undefined ? "" : `, gives up at ${when(until)}`}`}>
            <strong>{w.agentName}</strong> <span class="waited">waiting {span(now - since)}</span>
            {until !== undefined && <span class="dim"> · gives up in {countdown(until - now)}</span>}
          </li>
        );
      })}
    </ol>
  );
}

/** Where a row stands: held, lapsed on the hub clock, or ended (released or force-released). */
function stateOf(model: ProjectModel, row: LeaseRow): string {
  if (leaseEnded(row)) return row.mark!;
  return model.leaseLive(row.lease) ? "held" : "lapsed";
}

function LeaseLine({ model, row, now, hands }: { model: ProjectModel; row: LeaseRow; now: number; hands: OperatorHands }) {
  const { lease, mark, from } = row;
  const state = stateOf(model, row);
  const left = (msOf(lease.expiresAt) ?? 0) - now;
  return (
    <tr data-lease={lease.name} data-state={state} class={`lease-${leaseEnded(row) ? "released" : state}`}>
      <td data-label="Name">
        <strong>{lease.name}</strong>
        {mark && <span class={`tag mark-${mark.replace(" ", "-")}`}>{mark}</span>}
      </td>
      <td data-label="Holder">
        <span class="holder">{lease.holderAgentName}</span>
        {from && (
          <span class="dim from">
            from {from.holder}, {from.how}
          </span>
        )}
      </td>
      <td data-label="Fencing token" class="token num">
        {String(lease.fencingToken)}
      </td>
      <td data-label="Time left" class="left num" title={`expires ${when(msOf(lease.expiresAt))}`}>
        {state === "held" ? countdown(left) : state}
      </td>
      <td data-label="Waiting" class="queue">
        {leaseEnded(row) ? "" : <Waiters model={model} lease={lease} now={now} />}
      </td>
      <td data-label="" class="actions">
        {!leaseEnded(row) && <RowAction action="release" label={`Release ${lease.name}`} hands={hands} onClick={() => hands.release(lease)} />}
      </td>
    </tr>
  );
}

export function LeasesView({ model, hands }: { model: ProjectModel; hands: OperatorHands }) {
  const now = model.clock.now();
  const rows = [...model.leases.values()].sort((a, b) => a.lease.name.localeCompare(b.lease.name));
  if (rows.length === 0) return <Empty>No lease is held in this project.</Empty>;
  return (
    <section aria-labelledby="leases-title">
      <h2 id="leases-title">Leases</h2>
      <table class="grid">
        <thead>
          <tr>
            <th>Name</th>
            <th>Holder</th>
            <th>Fencing token</th>
            <th>Time left</th>
            <th>Waiting</th>
            <th>
              <span class="sr-only">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {rows.map((row) => (
            <LeaseLine key={row.lease.name} model={model} row={row} now={now} hands={hands} />
          ))}
        </tbody>
      </table>
    </section>
  );
}
