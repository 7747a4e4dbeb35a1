// The operator's hands: release a lease whoever holds it, evict an agent, revoke a project token
// (admin). Each asks first (an in-page confirmation saying what will happen), then calls the hub
// (OpsService) and says what it did or why it refused. The views show the outcome as the stream
// brings it (a revoked token: as the hub answered).
import { useMemo, useState } from "preact/hooks";
import { ConnectError } from "@connectrpc/connect";
import type { Lease } from "../../gen/ts/kxm/hub/v1/lease_pb.js";
import { TokenScope, type ProjectToken } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import type { Agent } from "../../gen/ts/kxm/hub/v1/presence_pb.js";
import "./hands.css";
import { ConfirmDialog } from "./confirm.js";
import { nameOf } from "./format.js";
import { reasonOf } from "./live.js";
import type { ProjectModel } from "./model.js";
import { adminRefusalText, clientsFor, type Session } from "./session.js";

/** What the views' buttons call. */
export interface OperatorHands {
  /** The page is live: what the rows show is current, so the buttons are enabled. */
  ready: boolean;
  release: (lease: Lease) => void;
  evict: (agent: Agent) => void;
  /** Revoke a project token; `revoked` gets the token as the hub answered it. */
  revoke: (token: ProjectToken, revoked: (t: ProjectToken) => void) => void;
}

const actionLabel = { release: "Release", evict: "Evict", revoke: "Revoke" } as const;

/** A row's action button (Release, Evict, Revoke): enabled only while the page is live. */
export function RowAction(p: { action: keyof typeof actionLabel; label: string; hands: OperatorHands; onClick: () => void }) {
  return (
    <button type="button" class="row-action" data-action={p.action} aria-label={p.label} disabled={!p.hands.ready} onClick={p.onClick}>
      {actionLabel[p.action]}
    </button>
  );
}

/** What the operator asked for, as the row showed it when they clicked. */
type Ask =
  | { kind: "release"; lease: Lease }
  | { kind: "evict"; agent: Agent }
  | { kind: "revoke"; token: ProjectToken; revoked: (t: ProjectToken) => void };

/** Why the hub refused an action, in words, with the hub's own message. */
export function actionRefusal(e: unknown, ask: Ask, session: Session): string {
  if (!(e instanceof ConnectError)) return `The call failed: ${String(e)}`;
  const reason = reasonOf(e);
  const said = `The hub said: “${e.rawMessage}”.`;
  if (reason === undefined) return `The hub could not be reached (${e.rawMessage}): nothing was changed.`;
  if (ask.kind === "revoke") {
    if (reason === "TOKEN_NOT_FOUND") return `Not revoked: the hub knows no token ${ask.token.tokenId} in this project. ${said}`;
    return `Not revoked. ${adminRefusalText(e, session, "revoke a project's token")}`;
  }
  if (ask.kind === "release") {
    const name = ask.lease.name;
    if (reason === "LEASE_SUPERSEDED") return `Not released: ${name} changed hands since token ${ask.lease.fencingToken} was shown, and only that token was to be released. ${said}`;
    if (reason === "LEASE_NOT_FOUND") return `Not released: nobody holds ${name} any more. ${said}`;
  }
  if (reason === "TARGET_NOT_FOUND") return `Not evicted: the hub knows no such agent in this project. ${said}`;
  if (reason === "INVALID_AUTH") return `The hub refused this token for that: it is neither the admin token nor this project's. ${said}`;
  return `The hub refused: ${e.rawMessage}`;
}

const list = (names: string[]) => [...names].sort().join(", ");

function ReleaseText({ model, lease }: { model: ProjectModel; lease: Lease }) {
  const waiters = model.waiters(model.leases.get(lease.name)?.lease ?? lease);
  return (
    <>
      <p>
        <strong>{lease.holderAgentName}</strong> holds it on fencing token <strong>{String(lease.fencingToken)}</strong> and loses it at
        once: its next renew or release is refused.
      </p>
      <p>
        {waiters.length > 0
          ? `${waiters[0]!.agentName}, first of ${waiters.length} waiting, gets it on the next token.`
          : "Nobody is waiting: the lease becomes free."}{" "}
        If it changed hands since this token was shown, the hub refuses and nothing is released.
      </p>
    </>
  );
}

function RevokeText({ token }: { token: ProjectToken }) {
  return (
    <>
      <p>
        The {nameOf(TokenScope, token.scope)} token{token.label && <> “{token.label}”</>} is refused from its callers' next call, on every hub sharing
        the store, and the streams opened with it end.
      </p>
      <p>A revoked token cannot be brought back: to let its callers in again, create a new token and give it to them.</p>
    </>
  );
}

function EvictText({ model, agent }: { model: ProjectModel; agent: Agent }) {
  const held = model.leasesOf(agent.id).map((l) => l.name);
  return (
    <>
      <p>It is marked offline at once and its key stops working: its calls and streams are refused.</p>
      <p>
        {held.length > 0 ? `Its leases (${list(held)}) are released, each to its first waiter on the next token.` : "It holds no lease."} Its
        waiting acquires leave their queues; its messages stay, and it can register again under its name.
      </p>
    </>
  );
}

/** The hands for one project's views, and what they put on screen (the dialog, the outcome). */
export function useOperatorHands(session: Session, model: ProjectModel) {
  const ops = useMemo(() => clientsFor(session.token).ops, [session.token]);
  const [ask, setAsk] = useState<Ask | undefined>();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();
  const [notice, setNotice] = useState<string | undefined>();
  const open = (a: Ask) => (setAsk(a), setError(undefined), setNotice(undefined));
  const hands: OperatorHands = {
    ready: model.link === "live",
    release: (lease) => open({ kind: "release", lease }),
    evict: (agent) => open({ kind: "evict", agent }),
    revoke: (token, revoked) => open({ kind: "revoke", token, revoked }),
  };

  const confirm = async () => {
    if (!ask) return;
    setBusy(true);
    try {
      if (ask.kind === "release") {
        const { name, fencingToken } = ask.lease;
        const r = await ops.forceReleaseLease({ project: model.project, name, fencingToken });
        setNotice(
          r.next
            ? `Released ${name} (token ${fencingToken}): ${r.next.holderAgentName} holds it now, on token ${r.next.fencingToken}.`
            : `Released ${name} (token ${fencingToken}): nobody was waiting, it is free.`,
        );
      } else if (ask.kind === "evict") {
        const r = await ops.evictAgent({ project: model.project, agentId: ask.agent.id });
        const released = r.releasedLeases.map((l) => l.name);
        setNotice(`Evicted ${ask.agent.name}: offline, its key refused${released.length > 0 ? `; released ${list(released)}` : ""}.`);
      } else {
        const { tokenId } = ask.token;
        const r = await ops.revokeProjectToken({ project: model.project, tokenId });
        if (r.token) ask.revoked(r.token);
        setNotice(`Revoked ${tokenId}: the hub refuses it from now on.`);
      }
      setAsk(undefined);
    } catch (e) {
      setError(actionRefusal(e, ask, session));
    } finally {
      setBusy(false);
    }
  };

  const close = () => (setAsk(undefined), setError(undefined));
  const noticeLine = notice && (
    <p id="notice" class="notice" role="status">
      {notice}{" "}
      <button type="button" class="quiet small" onClick={() => setNotice(undefined)}>
        Dismiss
      </button>
    </p>
  );
  const dialog = ask && (
    <ConfirmDialog
      title={
        ask.kind === "release" ? `Release lease ${ask.lease.name}?` : ask.kind === "evict" ? `Evict agent ${ask.agent.name}?` : `Revoke token ${ask.token.tokenId}?`
      }
      action={actionLabel[ask.kind]}
      busyLabel={{ release: "Releasing…", evict: "Evicting…", revoke: "Revoking…" }[ask.kind]}
      busy={busy}
      error={error}
      onConfirm={confirm}
      onClose={close}
    >
      {ask.kind === "release" ? (
        <ReleaseText model={model} lease={ask.lease} />
      ) : ask.kind === "evict" ? (
        <EvictText model={model} agent={ask.agent} />
      ) : (
        <RevokeText token={ask.token} />
      )}
    </ConfirmDialog>
  );
  return { hands, notice: noticeLine, dialog };
}
