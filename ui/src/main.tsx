// The operator page: sign in, then the live views of the hub's projects. Everything on screen
// comes from the hub's streams (no polling); the page counts time down between frames on the
// hub's clock as the frames state it.
import { render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import "./style.css";
import { follow, type LinkState } from "./live.js";
import { ProjectModel } from "./model.js";
import { clientsFor, forgetSession, refusalText, savedSession, saveSession, signIn, type Session } from "./session.js";
import { AgentsView, AlertsView, LeasesView, MessagesView, ProjectsView, RunsView } from "./views.js";
import type { ProjectSummary } from "../../gen/ts/kxm/hub/v1/ops_pb.js";

const views = [
  { id: "agents", label: "Agents" },
  { id: "leases", label: "Leases" },
  { id: "messages", label: "Messages" },
  { id: "runs", label: "Runs" },
  { id: "alerts", label: "Alerts" },
] as const;
type ViewId = (typeof views)[number]["id"];

/** Keep-alives come every 15 s by default; twice that without a frame is a dead connection. */
const silenceMs = 35_000;

type Route = { kind: "projects" } | { kind: "project"; project: string; view: ViewId };

function parseRoute(hash: string, session: Session): Route {
  const m = /^#\/p\/([^/]+)(?:\/([a-z]+))?$/.exec(hash);
  const view = views.find((v) => v.id === m?.[2])?.id ?? "agents";
  if (m) {
    const project = decodeURIComponent(m[1]!);
    if (session.admin || project === session.project) return { kind: "project", project, view };
  }
  if (!session.admin && session.project) return { kind: "project", project: session.project, view };
  return { kind: "projects" };
}

export const projectHref = (project: string, view: ViewId = "agents") => `#/p/${encodeURIComponent(project)}/${view}`;

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return hash;
}

/** Re-renders every second while mounted (countdowns), on the page's own timer. */
function useTick(): number {
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const t = setInterval(() => setTick((n) => n + 1), 1_000);
    return () => clearInterval(t);
  }, []);
  return tick;
}

function LinkBadge({ state }: { state: LinkState | "refused" }) {
  const text = { live: "live", connecting: "connecting…", reconnecting: "reconnecting…", refused: "signed out" }[state];
  return (
    <span id="link-state" class={`badge link-${state}`} data-state={state} role="status" aria-live="polite">
      {text}
    </span>
  );
}

function SignIn({ message, onSignedIn }: { message?: string; onSignedIn: (s: Session) => void }) {
  const [token, setToken] = useState("");
  const [project, setProject] = useState("");
  const [error, setError] = useState(message);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    const named = project.trim() || undefined;
    try {
      onSignedIn(await signIn(token.trim(), named));
    } catch (x) {
      setError(refusalText(x, named));
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <h1>kxm hub</h1>
      <form onSubmit={submit} aria-describedby="signin-help">
        <label>
          Token
          <input id="token" type="password" autoComplete="off" value={token} onInput={(e) => setToken(e.currentTarget.value)} />
        </label>
        <label>
          Project <span class="hint">(for a project's token)</span>
          <input id="project" type="text" autoComplete="off" spellcheck={false} value={project} onInput={(e) => setProject(e.currentTarget.value)} />
        </label>
        <button type="submit" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
        <p id="signin-help" class="hint">
          The admin token shows every project; a project's token shows that project. On a hub listening on loopback without an
          admin token, leave the token empty. The token stays in this tab only.
        </p>
        {error && (
          <p id="signin-error" class="error" role="alert">
            {error}
          </p>
        )}
      </form>
    </main>
  );
}

function Header(props: { session: Session; project?: string; link: LinkState | "refused"; onSignOut: () => void }) {
  return (
    <header class="top">
      <a class="brand" href={props.session.admin ? "#/projects" : projectHref(props.project ?? "")}>
        kxm hub
      </a>
      {props.project && <span class="project-name">{props.project}</span>}
      <span class="spacer" />
      <LinkBadge state={props.link} />
      <button type="button" class="quiet" onClick={props.onSignOut}>
        Sign out
      </button>
    </header>
  );
}

function Projects({ session, onRefused, onSignOut }: { session: Session; onRefused: (m: string) => void; onSignOut: () => void }) {
  const [rows, setRows] = useState<ProjectSummary[] | undefined>();
  const [link, setLink] = useState<LinkState>("connecting");
  useEffect(() => {
    const ac = new AbortController();
    const ops = clientsFor(session.token).ops;
    void follow(
      {
        open: (signal) => ops.watchProjects({}, { signal }),
        onFrame: (f) => {
          if (f.event.case === "projects") setRows(f.event.value.projects);
        },
        onState: setLink,
        onRefused: (e) => onRefused(refusalText(e)),
        silenceMs,
      },
      ac.signal,
    );
    return () => ac.abort();
  }, [session.token]);
  return (
    <>
      <Header session={session} link={link} onSignOut={onSignOut} />
      <main id="main">
        <ProjectsView rows={rows} />
      </main>
    </>
  );
}

function Project(props: { session: Session; project: string; view: ViewId; onRefused: (m: string) => void; onSignOut: () => void }) {
  const { session, project } = props;
  const model = useMemo(() => new ProjectModel(project), [project, session.token]);
  const [, setVersion] = useState(0);
  const tick = useTick();
  useEffect(() => model.subscribe(() => setVersion((v) => v + 1)), [model]);
  useEffect(() => {
    if (model.prune()) setVersion((v) => v + 1);
  }, [tick, model]);
  useEffect(() => {
    // The four views on one stream (WatchProject): a browser keeps six HTTP/1.1 connections per
    // hub, so one per tab leaves room for other tabs and the page's own calls.
    const ac = new AbortController();
    const ops = clientsFor(session.token).ops;
    void follow(
      {
        open: (signal) => {
          const c = model.cursors;
          return ops.watchProject(
            {
              project,
              presenceAfterCursor: c.presence,
              leasesAfterCursor: c.leases,
              messagesAfterCursor: c.messages,
              runsAfterCursor: c.runs,
            },
            { signal },
          );
        },
        onFrame: (f) => model.onProject(f),
        onExpired: () => (model.cursors = {}),
        onState: (s) => model.setLink(s),
        onRefused: (e) => props.onRefused(refusalText(e, project)),
        silenceMs,
      },
      ac.signal,
    );
    return () => ac.abort();
  }, [model]);

  const counts: Record<ViewId, number | undefined> = {
    agents: [...model.agents.values()].filter((a) => a.online).length,
    leases: [...model.leases.values()].filter((l) => l.mark !== "released" && model.leaseLive(l.lease)).length,
    messages: model.messageTotal,
    runs: [...model.runtimes.values()].reduce((n, r) => n + r.runTotal, 0),
    alerts: model.alerts.length || undefined,
  };
  return (
    <>
      <Header session={session} project={project} link={model.link} onSignOut={props.onSignOut} />
      <nav class="tabs" aria-label="Views">
        {session.admin && (
          <a href="#/projects" class="tab">
            All projects
          </a>
        )}
        {views.map((v) => (
          <a
            href={projectHref(project, v.id)}
            class={`tab${v.id === props.view ? " current" : ""}`}
            aria-current={v.id === props.view ? "page" : undefined}
            data-view={v.id}
          >
            {v.label}
            {counts[v.id] !== undefined && <span class="count">{counts[v.id]}</span>}
          </a>
        ))}
      </nav>
      <main id="main" data-view={props.view}>
        {props.view === "agents" && <AgentsView model={model} />}
        {props.view === "leases" && <LeasesView model={model} />}
        {props.view === "messages" && <MessagesView model={model} />}
        {props.view === "runs" && <RunsView model={model} />}
        {props.view === "alerts" && <AlertsView model={model} />}
      </main>
    </>
  );
}

function App() {
  const [session, setSession] = useState<Session | undefined>(savedSession);
  const [message, setMessage] = useState<string | undefined>();
  const hash = useHash();
  document.body.dataset.ready = "true";
  if (!session) {
    return (
      <SignIn
        message={message}
        onSignedIn={(s) => {
          saveSession(s);
          setMessage(undefined);
          setSession(s);
          location.hash = s.project ? projectHref(s.project) : "#/projects";
        }}
      />
    );
  }
  const signOut = (why?: string) => {
    forgetSession();
    setMessage(why);
    setSession(undefined);
  };
  const route = parseRoute(hash, session);
  if (route.kind === "projects") return <Projects session={session} onRefused={signOut} onSignOut={() => signOut()} />;
  return <Project key={route.project} session={session} project={route.project} view={route.view} onRefused={signOut} onSignOut={() => signOut()} />;
}

render(<App />, document.getElementById("app")!);
