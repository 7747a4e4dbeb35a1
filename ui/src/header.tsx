// The page's header (who is signed in, whether the stream is live) and, while the connection
// is lost, the banner that says the tables are what was known then.
import { clockTime, when } from "./format.js";
import type { LinkState } from "./live.js";
import type { Session } from "./session.js";

export type LinkShown = LinkState | "refused";

function LinkBadge({ state }: { state: LinkShown }) {
  const text = { live: "live", connecting: "connecting…", reconnecting: "reconnecting…", refused: "signed out" }[state];
  return (
    <span id="link-state" class={`badge link-${state}`} data-state={state} role="status" aria-live="polite">
      {text}
    </span>
  );
}

/** Who the page is signed in as. */
const whoOf = (s: Session) => (s.open ? "open hub (no token)" : s.admin ? "admin token" : "project token");

export function Header(props: { session: Session; home: string; project?: string; link: LinkShown; onSignOut: () => void }) {
  return (
    <header class="top">
      <a class="brand" href={props.home}>
        kxm hub
      </a>
      {props.project && <span class="project-name">{props.project}</span>}
      <span class="spacer" />
      <span id="signed-in-as" class={`tag who${props.session.open ? " open" : ""}`}>
        {whoOf(props.session)}
      </span>
      <LinkBadge state={props.link} />
      <button type="button" class="quiet" onClick={props.onSignOut}>
        Sign out
      </button>
    </header>
  );
}

/** Whether the views are cut off from the hub: shown dimmed, under the banner. */
export const isLost = (link: LinkShown) => link === "reconnecting";

/** Shown while the connection is lost: the tables stand still at `knownAtMs` (hub clock). */
export function LostBanner({ link, knownAtMs }: { link: LinkShown; knownAtMs?: number }) {
  if (!isLost(link)) return null;
  return (
    <div id="connection-lost" class="lost-banner" role="alert">
      <strong>Connection lost: reconnecting…</strong>{" "}
      {knownAtMs === undefined ? (
        "Nothing was received yet."
      ) : (
        <>
          the tables show what was known at <time title={when(knownAtMs)}>{clockTime(knownAtMs)}</time>.
        </>
      )}
    </div>
  );
}
