// The operator page: sign in, then the live views of the hub's projects. Everything on screen
// comes from the hub's streams (no polling); the page counts time down between frames on the
// hub's clock as the frames state it. The admin's Tokens and Audit views read on demand.
import { render } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import "./style.css";
import { useOperatorHands } from "./actions.js";
import { AuditView } from "./audit-view.js";
import { Header, isLost, LostBanner } from "./header.js";
import { LeasesView } from "./leases-view.js";
import { follow, HubClock, type LinkState } from "./live.js";
import { leaseEnded, ProjectModel } from "./model.js";
import { clientsFor, forgetSession, mayOpenBySelf, openHubSession, refusalText, savedSession, saveSession, type Session } from "./session.js";
import { SignIn } from "./signin.js";
import { TokensView } from "./tokens-view.js";
import { AgentsView, AlertsView, MessagesView, ProjectsView, RunsView } from "./views.js";
import type { ProjectSummary } from "../../gen/ts/kxm/hub/v1/ops_pb.js";

const views = [
  { id: "agents", label: "Agents" },
  { id: "leases", label: "Leases" },
  { id: "messages", label: "Messages" },
  { id: "runs", label: "Runs" },
  { id: "alerts", label: "Alerts" },
  { id: "tokens", label: "Tokens" },
  { id: "audit", label: "Audit" },
] as const;
type ViewId = (typeof views)[number]["id"];

/** Keep-alives come every 15 s by default; twice that without a frame is a dead connection. */
const silenceMs = 35_000;

type Route = { kind: "projects"; view: HubViewId } | { kind: "project"; project: string; view: ViewId };

/** The admin's hub-wide views: every project, and the whole audit trail. */
type HubViewId = "projects" | "audit";

function parseRoute(hash: string, session: Session): Route {
  if (hash === "#/audit" && session.admin) return { kind: "projects", view: "audit" };
  const m = /^#\/p\/([^/]+)(?:\/([a-z]+))?$/.exec(hash);
  const view = views.find((v) => v.id === m?.[2])?.id ?? "agents";
  if (m) {
    const project = decodeURIComponent(m[1]!);
    if (session.admin || project === session.project) return { kind: "project", project, view };
  }
  if (!session.admin && session.project) return { kind: "project", project: session.project, view };
  return { kind: "projects", view: "projects" };
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

function Projects(props: { session: Session; view: HubViewId; onRefused: (m: string) => void; onSignOut: () => void }) {
  const { session, onRefused, onSignOut } = props;
  const [rows, setRows] = useState<ProjectSummary[] | undefined>();
  const [link, setLink] = useState<LinkState>("connecting");
  const [knownAtMs, setKnownAt] = useState<number | undefined>();
  useEffect(() => {
    const ac = new AbortController();
    const ops = clientsFor(session.token).ops;
    const clock = new HubClock();
    void follow(
      {
        open: (signal) => ops.watchProjects({}, { signal }),
        onFrame: (f) => {
          if (f.event.case === "projects") setRows(f.event.value.projects);
          else if (f.event.case === "keepAlive") clock.observe(f.event.value.at);
          setKnownAt(clock.now());
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
      <Header session={session} home="#/projects" link={link} onSignOut={onSignOut} />
      <nav class="tabs" aria-label="Views">
        {(
          [
            ["projects", "#/projects", "All projects"],
            ["audit", "#/audit", "Audit"],
          ] as const
        ).map(([id, href, label]) => (
          <a href={href} class={`tab${id === props.view ? " current" : ""}`} aria-current={id === props.view ? "page" : undefined} data-view={id}>
            {label}
          </a>
        ))}
      </nav>
      <LostBanner link={link} knownAtMs={knownAtMs} />
      <main id="main" data-view={props.view} class={isLost(link) ? "lost" : undefined}>
        {props.view === "projects" ? <ProjectsView rows={rows} /> : <AuditView session={session} />}
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

  const { hands, notice, dialog } = useOperatorHands(session, model);

  const counts: Record<ViewId, number | undefined> = {
    agents: [...model.agents.values()].filter((a) => a.online).length,
    leases: [...model.leases.values()].filter((l) => !leaseEnded(l) && model.leaseLive(l.lease)).length,
    messages: model.messageTotal,
    runs: [...model.runtimes.values()].reduce((n, r) => n + r.runTotal, 0),
    alerts: model.alerts.length || undefined,
    tokens: undefined,
    audit: undefined,
  };
  return (
    <>
      <Header
        session={session}
        home={session.admin ? "#/projects" : projectHref(project)}
        project={project}
        link={model.link}
        onSignOut={props.onSignOut}
      />
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
      <LostBanner link={model.link} knownAtMs={model.knownAtMs} />
      <main id="main" data-view={props.view} class={isLost(model.link) ? "lost" : undefined}>
        {notice}
        {props.view === "agents" && <AgentsView model={model} hands={hands} />}
        {props.view === "leases" && <LeasesView model={model} hands={hands} />}
        {props.view === "messages" && <MessagesView model={model} />}
        {props.view === "runs" && <RunsView model={model} />}
        {props.view === "alerts" && <AlertsView model={model} />}
        {props.view === "tokens" && <TokensView session={session} model={model} hands={hands} />}
        {props.view === "audit" && <AuditView session={session} project={project} />}
      </main>
      {dialog}
    </>
  );
}

function App() {
  const [session, setSession] = useState<Session | undefined>(savedSession);
  const [message, setMessage] = useState<string | undefined>();
  // A hub that accepts no token at all is signed in to on load, without asking.
  const [probing, setProbing] = useState(() => !session && mayOpenBySelf());
  const hash = useHash();
  const signedIn = (s: Session) => {
    saveSession(s);
    setMessage(undefined);
    setSession(s);
    location.hash = s.project ? projectHref(s.project) : "#/projects";
  };
  useEffect(() => {
    if (!probing) return;
    void openHubSession().then((s) => {
      if (s) signedIn(s);
      setProbing(false);
    });
  }, []);
  useEffect(() => {
    if (!probing) document.body.dataset.ready = "true";
  }, [probing]);
  if (probing) return <main class="signin" aria-busy="true" />;
  if (!session) return <SignIn message={message} onSignedIn={signedIn} />;
  const signOut = (why?: string) => {
    forgetSession();
    setMessage(why);
    setSession(undefined);
  };
  const route = parseRoute(hash, session);
  if (route.kind === "projects") return <Projects session={session} view={route.view} onRefused={signOut} onSignOut={() => signOut()} />;
  return <Project key={route.project} session={session} project={route.project} view={route.view} onRefused={signOut} onSignOut={() => signOut()} />;
}

render(<App />, document.getElementById("app")!);
