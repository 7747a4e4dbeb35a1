// The Tokens view (admin): the project's managed tokens (ListProjectTokens, never a secret), a
// form to create one whose secret is shown once with a copy button, and Revoke per live token
// behind the operator's confirmation (actions.tsx). States and expiries read on the hub clock.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { ConnectError } from "@connectrpc/connect";
import { TokenScope, TokenState, type ProjectToken } from "../../gen/ts/kxm/hub/v1/ops_pb.js";
import { RowAction, type OperatorHands } from "./actions.js";
import "./admin.css";
import { nameOf, span, when } from "./format.js";
import { msOf, reasonOf } from "./live.js";
import type { ProjectModel } from "./model.js";
import { adminRefusalText, clientsFor, type Session } from "./session.js";
import { Empty } from "./views.js";

/** The longest expiry the hub takes: ten years. */
const maxTtlMs = 315_360_000_000;
const unitMs = { minutes: 60_000, hours: 3_600_000, days: 86_400_000 } as const;
type Unit = keyof typeof unitMs;

const scopes = [
  { scope: TokenScope.AGENT, text: "agent: everything" },
  { scope: TokenScope.READ, text: "read: reads, watches, CheckFence" },
  { scope: TokenScope.CHECK, text: "check: CheckFence only" },
];

/** A token's state now: the hub's word, or its expiry passed on the hub clock since. */
function stateOf(t: ProjectToken, now: number): string {
  if (t.state === TokenState.LIVE && (msOf(t.expiresAt) ?? Infinity) <= now) return "expired";
  return nameOf(TokenState, t.state);
}

/** Why the hub refused to create a token, in words. */
function createRefusal(e: unknown, session: Session): string {
  const reason = reasonOf(e);
  if (reason === "PROTOCOL_ERROR" && e instanceof ConnectError) return `Not created: ${e.rawMessage}`;
  if (reason === "TOKEN_LIMIT_REACHED") return "Not created: the project holds 100 live tokens, the most it may; revoke one first.";
  return `Not created. ${adminRefusalText(e, session, "create a project's token")}`;
}

/** Copies `text`; where the Clipboard API is missing (plain HTTP beyond loopback) or refused, copies the selection of `el`. */
async function copy(text: string, el: HTMLElement | null): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    if (!el) return false;
    getSelection()?.selectAllChildren(el);
    try {
      return document.execCommand("copy");
    } catch {
      return false;
    }
  }
}

/** The secret of the token just created: shown here once, forgotten when closed or the view is left. */
function Secret({ token, secret, onClose }: { token: ProjectToken; secret: string; onClose: () => void }) {
  const value = useRef<HTMLElement>(null);
  const button = useRef<HTMLButtonElement>(null);
  const [copied, setCopied] = useState<boolean | undefined>();
  useEffect(() => button.current?.focus(), [secret]);
  return (
    <section id="token-secret" class="secret" aria-labelledby="token-secret-title" data-token={token.tokenId}>
      <h3 id="token-secret-title">
        Token {token.tokenId} created: its secret, shown once
      </h3>
      <p class="secret-warning">
        <strong>Shown once.</strong> Copy it now and hand it to its callers (<code>Authorization: Bearer …</code>). The hub keeps only its
        hash and never shows it again; this page forgets it when this box is closed or the view is left.
      </p>
      <div class="secret-row">
        <code id="token-secret-value" class="secret-value" ref={value}>
          {secret}
        </code>
        <button type="button" id="token-copy" class="small" ref={button} onClick={async () => setCopied(await copy(secret, value.current))}>
          Copy
        </button>
      </div>
      <p id="token-copy-state" class="hint" role="status">
        {copied === true ? "Copied to the clipboard." : copied === false ? "Could not copy: the secret is selected, copy it with Ctrl+C (⌘C)." : ""}
      </p>
      <button type="button" id="token-secret-close" class="quiet small" onClick={onClose}>
        I have stored it: close
      </button>
    </section>
  );
}

function CreateForm({ session, project, onCreated }: { session: Session; project: string; onCreated: (t: ProjectToken, secret: string) => void }) {
  const ops = useMemo(() => clientsFor(session.token).ops, [session.token]);
  const [scope, setScope] = useState(TokenScope.AGENT);
  const [label, setLabel] = useState("");
  const [ttl, setTtl] = useState("");
  const [unit, setUnit] = useState<Unit>("days");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | undefined>();
  const submit = async (e: Event) => {
    e.preventDefault();
    let ttlMs: bigint | undefined;
    if (ttl.trim() !== "") {
      const ms = Number(ttl) * unitMs[unit];
      if (!Number.isFinite(ms) || ms < 1_000) return setError("Not created: an expiry is a positive number (empty: the token never expires).");
      if (ms > maxTtlMs) return setError("Not created: an expiry is at most ten years.");
      ttlMs = BigInt(Math.round(ms));
    }
    setBusy(true);
    setError(undefined);
    try {
      const r = await ops.createProjectToken({ project, scope, label: label.trim(), ...(ttlMs !== undefined && { ttlMs }) });
      if (r.token) onCreated(r.token, r.secret);
      setLabel("");
      setTtl("");
    } catch (x) {
      setError(createRefusal(x, session));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form id="token-form" class="token-form" onSubmit={submit} aria-labelledby="token-form-title">
      <h3 id="token-form-title">New token</h3>
      <div class="fields">
        <label>
          Scope <span class="hint">(what it may do)</span>
          <select id="token-scope" value={String(scope)} onChange={(e) => setScope(Number(e.currentTarget.value) as TokenScope)}>
            {scopes.map((s) => (
              <option value={String(s.scope)}>{s.text}</option>
            ))}
          </select>
        </label>
        <label>
          Label <span class="hint">(for people)</span>
          <input id="token-label" type="text" maxLength={200} autoComplete="off" spellcheck={false} value={label} onInput={(e) => setLabel(e.currentTarget.value)} />
        </label>
        <label>
          Expires after <span class="hint">(empty: never)</span>
          <span class="ttl">
            <input id="token-ttl" type="number" min="1" step="any" inputMode="decimal" value={ttl} onInput={(e) => setTtl(e.currentTarget.value)} />
            <select id="token-ttl-unit" aria-label="Unit" value={unit} onChange={(e) => setUnit(e.currentTarget.value as Unit)}>
              {Object.keys(unitMs).map((u) => (
                <option value={u}>{u}</option>
              ))}
            </select>
          </span>
        </label>
        <button type="submit" id="token-create" disabled={busy}>
          {busy ? "Creating…" : "Create token"}
        </button>
      </div>
      <p class="hint">
        Scopes: <strong>agent</strong> does everything a project token does; <strong>read</strong> the operator's reads and watches and
        CheckFence, nothing that changes state; <strong>check</strong> CheckFence only, for a guard in front of a resource.
      </p>
      <p class="hint">
        Once {project} has a token of its own, the admin token no longer stands in for its agents' calls, even after its tokens are revoked;
        the operator's reads and hands still take it.
      </p>
      {error && (
        <p id="token-create-error" class="error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}

function TokenLine({ t, now, hands, onRevoked }: { t: ProjectToken; now: number; hands: OperatorHands; onRevoked: (t: ProjectToken) => void }) {
  const state = stateOf(t, now);
  const expires = msOf(t.expiresAt);
  const revoked = msOf(t.revokedAt);
  return (
    <tr data-token={t.tokenId} data-state={state} class={`token-${state}`}>
      <td data-label="Token" class="mono">
        {t.tokenId}
      </td>
      <td data-label="Scope">{nameOf(TokenScope, t.scope)}</td>
      <td data-label="State">
        <span class={`badge token-${state}`}>{state}</span>
        {revoked !== undefined && <span class="dim"> {when(revoked)}</span>}
      </td>
      <td data-label="Created" class="num">
        {when(msOf(t.createdAt))}
      </td>
      <td data-label="Expires" class="num">
        {expires === undefined ? (
          <span class="dim">never</span>
        ) : (
          <>
            {when(expires)}
            {state === "live" && <span class="dim"> · in {span(expires - now)}</span>}
          </>
        )}
      </td>
      <td data-label="Label" class="wrap">
        {t.label}
      </td>
      <td data-label="" class="actions">
        {state === "live" && <RowAction action="revoke" label={`Revoke ${t.tokenId}`} hands={hands} onClick={() => hands.revoke(t, onRevoked)} />}
      </td>
    </tr>
  );
}

export function TokensView({ session, model, hands }: { session: Session; model: ProjectModel; hands: OperatorHands }) {
  const { project } = model;
  const ops = useMemo(() => clientsFor(session.token).ops, [session.token]);
  const [tokens, setTokens] = useState<ProjectToken[] | undefined>();
  const [error, setError] = useState<string | undefined>();
  const [busy, setBusy] = useState(false);
  const [created, setCreated] = useState<{ token: ProjectToken; secret: string } | undefined>();
  const gone = useMemo(() => new AbortController(), []);
  useEffect(() => () => gone.abort(), [gone]);

  const load = async () => {
    setBusy(true);
    try {
      const r = await ops.listProjectTokens({ project }, { signal: gone.signal });
      setTokens(r.tokens);
      setError(undefined);
    } catch (e) {
      if (!gone.signal.aborted) setError(adminRefusalText(e, session, "list or create a project's tokens"));
    } finally {
      if (!gone.signal.aborted) setBusy(false);
    }
  };
  useEffect(() => void load(), [ops, project]);

  const put = (t: ProjectToken) => setTokens((l) => [t, ...(l ?? []).filter((x) => x.tokenId !== t.tokenId)]);
  const replace = (t: ProjectToken) => setTokens((l) => (l ?? []).map((x) => (x.tokenId === t.tokenId ? t : x)));
  const now = model.clock.now();
  const live = tokens?.filter((t) => stateOf(t, now) === "live").length ?? 0;
  return (
    <section aria-labelledby="tokens-title" aria-busy={busy}>
      <h2 id="tokens-title">
        Tokens of {project} {tokens && <span class="count">{live}</span>}
      </h2>
      {error && (
        <p id="tokens-error" class="error" role="alert">
          {error}
        </p>
      )}
      {tokens === undefined ? (
        !error && <Empty>Reading the project's tokens…</Empty>
      ) : (
        <>
          {created && <Secret token={created.token} secret={created.secret} onClose={() => setCreated(undefined)} />}
          <CreateForm
            session={session}
            project={project}
            onCreated={(token, secret) => {
              put(token);
              setCreated({ token, secret });
            }}
          />
          <div class="toolbar">
            <h3>Managed tokens</h3>
            <button type="button" id="tokens-refresh" class="quiet small" disabled={busy} onClick={() => void load()}>
              Refresh
            </button>
          </div>
          <p class="hint">
            Live, expired and revoked, newest first; never their secrets. A token in the hub's configuration (KXM_PROJECT_TOKENS) is not
            listed.
          </p>
          {tokens.length === 0 ? (
            <Empty>This project has no managed token.</Empty>
          ) : (
            <table class="grid tokens">
              <thead>
                <tr>
                  <th>Token</th>
                  <th>Scope</th>
                  <th>State</th>
                  <th>Created (UTC)</th>
                  <th>Expires (UTC)</th>
                  <th>Label</th>
                  <th>
                    <span class="sr-only">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {tokens.map((t) => (
                  <TokenLine key={t.tokenId} t={t} now={now} hands={hands} onRevoked={replace} />
                ))}
              </tbody>
            </table>
          )}
        </>
      )}
    </section>
  );
}
