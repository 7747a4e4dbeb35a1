import type { AddressInfo } from "node:net";
import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import type { AuthRule } from "./auth/rules.js";
import { createAuthenticator } from "./auth/authenticate.js";
import { createRateLimiter } from "./auth/rate-limit.js";
import { clockWithTime, systemClock, type Clock } from "./clock.js";
import { isLoopback, validateConfig, type HubConfig } from "./config.js";
import { errors } from "./errors.js";
import { createBus } from "./events/bus.js";
import { ListenerCount } from "./events/listening.js";
import { changeRetention } from "./events/watch.js";
import { createLeases, leaseChangeOf, leaseTtl, type LeaseChange } from "./lease/leases.js";
import { createInboxStreams } from "./peer/inbox-stream.js";
import { createMessages } from "./peer/messages.js";
import type { InboxNotice } from "./domain.js";
import type { Observer } from "./observe.js";
import { createOpsRoutes } from "./ops/http.js";
import { createMetrics } from "./ops/metrics.js";
import { createLogger, createObserver } from "./ops/observer.js";
import { createOperatorLive, messageWatchChangeOf, runWatchChangeOf, type MessageWatchChange, type RunWatchChange } from "./operator/live.js";
import { createOperatorView } from "./operator/snapshot.js";
import { createSweeper } from "./ops/sweep.js";
import { createPresence, presenceChangeOf, type PresenceChange } from "./presence/presence.js";
import { createHttpHandler } from "./server/http-handler.js";
import { createAuthInterceptor, createAuthorize } from "./server/interceptors/auth.js";
import { createUnaryRules } from "./server/unary-rules.js";
import { createErrorInterceptor, toConnectError } from "./server/interceptors/errors.js";
import { createStreamRequestInterceptor } from "./server/interceptors/request-refusals.js";
import { createLimitsInterceptor } from "./server/interceptors/limits.js";
import { createObserveInterceptor } from "./server/interceptors/observe.js";
import { createStreamCapInterceptor } from "./server/interceptors/stream-cap.js";
import { createInProcessCaller } from "./wire/in-process.js";
import type { WireSwitch } from "./wire/adapter.js";
import { createShutdownSignal } from "./server/shutdown-signal.js";
import { createDualServer, remoteAddressOf } from "./http/listen.js";
import { ruleHeadersOf } from "./http/body.js";
import { HeaderBag } from "./http/header-bag.js";
import type { NodeRequest } from "./http/types.js";
import { loadTlsMaterial, secureContextOptions, tlsFilesOf, tlsServerOptions, watchTlsFiles } from "./http/tls.js";
import { routes, servedServices } from "./server/routes.js";
import { createWatchHandlers } from "./server/watch-handlers.js";
import { defaultPageDir, loadOperatorPage } from "./server/operator-page.js";
import { createSync } from "./sync/sync.js";
import { createPreparePool } from "./sync/prepare-pool.js";
import type { StreamChange } from "./store/change-feed.js";
import type { HubStore } from "./store/store.js";
import { SqliteStore } from "./store/sqlite/sqlite-store.js";
import { asOpenRefusal } from "./store/sqlite/open.js";
import { createStallWatch } from "./http/body.js";
import { PostgresStore } from "./store/postgres/postgres-store.js";
import { buildRestRoutes } from "./transcode/http-rules.js";
import { createRestFace } from "./transcode/rest-face.js";
import { createMcpFace } from "./mcp/face.js";
import { createInboxReader } from "./peer/inbox-read.js";
import { hubVersion } from "./cli/version.js";
import { createProjectTokens } from "./auth/project-tokens.js";
import { closesProject, endedTokenOf } from "./auth/tokens.js";
import { createAudit, createRefusalMonitor } from "./auth/audit.js";

export interface HubOverrides {
  clock?: Clock;
  store?: HubStore;
  /** Receives every log event and counter (tests assert on it). */
  tap?: Observer;
  /** false: no log file or stdout logging (tests). */
  log?: boolean;
  /** Services served beside the hub's own on the RPC face (benchmarks, diagnostics). */
  extraServices?: ExtraService[];
}

export interface ExtraService {
  service: DescService;
  impl: Partial<ServiceImpl<DescService>>;
  /** One rule for all its methods. */
  auth: AuthRule;
}

/**
 * The composition root: builds the store, domains, auth, both faces and the listener from the
 * configuration. Nothing listens until `listen()`. Throws ConfigError or StoreOpenError.
 */
export async function createHub(config: HubConfig, overrides: HubOverrides = {}) {
  validateConfig(config);
  // Read and checked before anything is created: a bad file refuses the start (invalid_config).
  const tlsFiles = tlsFilesOf(config);
  const tlsMaterial = tlsFiles && loadTlsMaterial(tlsFiles);
  const hostClock = overrides.clock ?? systemClock;
  const store: HubStore =
    overrides.store ??
    (config.databaseUrl
      ? // Decisions on PostgreSQL read the database's clock, one for every hub, unless a test injects its own.
        await PostgresStore.open({ url: config.databaseUrl, poolSize: config.databasePoolSize, clock: overrides.clock })
      : new SqliteStore({ path: config.dataPath, synchronous: config.sqliteSynchronous, clock: hostClock }));
  // On PostgreSQL every replica's time is the database's (what its decisions are made on).
  const clock = store.now ? clockWithTime(hostClock, () => store.now!()) : hostClock;
  // Held leases come from the store, so the gauge is right from the first scrape after a restart.
  const heldLeases = async () => (await store.listProjects(clock.now())).reduce((n, p) => n + p.heldLeases, 0);
  const metrics = createMetrics(store, { heldLeases });
  const hubLogger = overrides.log === false ? undefined : createLogger(config.logPath, config.logLevel);
  const observer = createObserver(hubLogger?.logger, metrics, overrides.tap);

  /** Everyone listening on the buses below: while nobody does, the store's tail looks seldom. */
  const listening = new ListenerCount();
  const presenceBus = createBus<PresenceChange>((c) => c.project, listening);
  const leaseBus = createBus<LeaseChange>((c) => c.project, listening);
  const messageBus = createBus<MessageWatchChange>((c) => c.project, listening);
  const runBus = createBus<RunWatchChange>((c) => c.project, listening);
  /** Every change of every project, for the live project list. */
  const projectsBus = createBus<StreamChange>(() => "*", listening);
  const inboxBus = createBus<InboxNotice>((n) => n.agentId, listening);
  /** Managed project tokens revoked or expired, by id: the streams opened with them end. */
  const endedTokens = createBus<string>((id) => id, listening);
  /** Projects that got a token of their own: the streams let in for having none end. */
  const closedProjects = createBus<string>((project) => project, listening);
  // Every change reaches the streams from the store, once durable: inbox events (this hub's with
  // the event, on PostgreSQL every hub's) here, and the watch changes below.
  const stopInboxTail = store.messages.tailInbox((n) => inboxBus.publish(n), listening);
  // Presence, lease, message and run changes are stored by the decisions that make them; the
  // store hands each over once it is durable (and, on PostgreSQL, the ones other hubs commit).
  const stopChangeTail = store.changes.tailChanges((c) => {
    if (c.stream === "leases") leaseBus.publish(leaseChangeOf(c));
    else if (c.stream === "presence") presenceBus.publish(presenceChangeOf(c));
    else if (c.stream === "messages") messageBus.publish(messageWatchChangeOf(c));
    else if (c.stream === "runs") runBus.publish(runWatchChangeOf(c));
    else {
      const tokenId = endedTokenOf(c.body);
      if (tokenId) endedTokens.publish(tokenId);
      else if (closesProject(c.body)) closedProjects.publish(c.project);
      return; // no project view changes with its tokens
    }
    projectsBus.publish(c);
  }, listening);
  /** Aborted by close(): ends every open stream and waiting call (acquire, ReadInbox) so shutdown does not wait on them. */
  const shutdown = createShutdownSignal();
  const presence = createPresence({ store, clock, observer, staleAfterMs: config.staleAfterMs });
  const leases = createLeases({
    store,
    clock,
    observer,
    bus: leaseBus,
    shutdown: shutdown.signal,
    keepOnline: { everyMs: config.streamKeepAliveMs, record: (c) => presence.recordActivity(c) },
  });
  const messages = createMessages({
    store,
    observer,
    messageTtlMs: config.messageTtlMs,
    messageRetentionMs: config.messageRetentionMs,
  });
  const stream = { keepAliveMs: config.streamKeepAliveMs };
  const openInbox = createInboxStreams({
    store,
    clock,
    messages,
    presence,
    inboxBus,
    presenceBus,
    ...stream,
    maxLag: config.streamMaxLag,
  });
  const readInbox = createInboxReader({ store, clock, messages, presence, inboxBus, ...stream, shutdown: shutdown.signal });
  const operator = createOperatorView({ store, clock, presence, messages, leases, tokenProjects: Object.keys(config.projectTokens) });
  const operatorLive = createOperatorLive({
    store,
    clock,
    presence,
    messages,
    changes: projectsBus,
    listProjects: () => operator.listProjects(),
  });
  const watches = createWatchHandlers({
    presence,
    leases,
    operator: operatorLive,
    presenceBus,
    leaseBus,
    messageBus,
    runBus,
    clock,
    ...stream,
    maxBuffered: config.streamMaxLag,
  });
  const limiter = createRateLimiter(config.rateLimit);
  const authenticator = createAuthenticator({
    store,
    presence,
    adminToken: config.authToken,
    projectTokens: config.projectTokens,
    loopback: isLoopback(config.host),
    clock,
  });
  const projectTokens = createProjectTokens({ tokens: store.tokens, clock, observer });
  const audit = createAudit({ store: store.tokens, clock, observer });
  /** Bursts of refused authentication from one address become audit alerts. */
  const refusals = createRefusalMonitor({ audit, clock });
  const extras = overrides.extraServices ?? [];
  const extraRules = Object.fromEntries(
    extras.flatMap((x) => x.service.methods.map((m) => [`${x.service.typeName}/${m.name}`, x.auth] as const)),
  );
  const authDeps = { authenticator, limiter, clock, extraRules, endedTokens, closedProjects, refusals };
  const interceptors = [
    createObserveInterceptor(observer),
    createErrorInterceptor(observer),
    createLimitsInterceptor(config.maxBodyBytes),
    createStreamRequestInterceptor(config.maxBodyBytes),
    createAuthInterceptor(authDeps),
    createStreamCapInterceptor(),
  ];
  const authorize = createAuthorize(authDeps);
  /** The same rules as plain calls, for unary calls made in-process (server/unary-rules.ts). */
  const unaryRules = createUnaryRules({
    observer,
    maxBodyBytes: config.maxBodyBytes,
    authorize,
    tokens: { endedTokens, clock },
    projects: { closedProjects, projectClosed: (project) => authenticator.projectClosed(project) },
  });
  /** `/metrics` is an admin-only call: its rule, budget and refusal alerts; answers its rate-limit headers. */
  const metricsAdmin = async (req: NodeRequest): Promise<Record<string, string>> => {
    const rate = new HeaderBag();
    await authorize({ methodKey: "/metrics", rule: { kind: "adminConfigured" }, header: ruleHeadersOf(req), remote: remoteAddressOf(req), message: undefined, extraHeaders: rate });
    const out: Record<string, string> = {};
    rate.forEach((v, k) => (out[k] = v));
    return out;
  };
  /**
   * Connect's cap on every request message it reads, after decompression and without a declared
   * length too (streams over HTTP/2); its refusal is answered as payload_too_large.
   */
  const readMaxBytes = config.maxBodyBytes;
  // Pushed events are checked and hashed on worker threads (none: on this one).
  const prepare = createPreparePool({
    threads: config.syncThreads,
    onError: (e) => observer.log("internal_error", { error: `sync prepare thread failed, hashing on the hub's thread: ${String(e)}` }),
  });
  const sync = createSync({ store, clock, observer, prepare, audit });
  const hubRoutes = routes({ presence, leases, messages, openInbox, readInbox, watches, sync, operator, tokens: projectTokens, audit });
  const serviceRoutes = (router: ConnectRouter) => {
    hubRoutes(router);
    for (const x of extras) router.service(x.service, x.impl);
  };
  /** Which path serves plain Connect calls, and in-process unary calls; tests flip it to send one request both ways. */
  const wire: WireSwitch = { mode: config.wire, fastServed: 0, directServed: 0 };
  // The REST face, plain Connect unary calls and MCP tool calls reach the same implementations
  // under the same rules in-process: as plain calls (unaryRules), or through the interceptor
  // chain itself when the wire switch says "connect".
  const inProcess = createInProcessCaller(serviceRoutes, interceptors, shutdown.signal, { rules: unaryRules, wire });
  // A server stream whose client reads nothing for two keep-alive intervals is ended (its lag
  // is past any bound by then, and its own lag check waits on its writer); the sweeper looks.
  const stalls = createStallWatch(2 * config.streamKeepAliveMs);
  const rest = createRestFace({
    routes: buildRestRoutes(servedServices),
    call: inProcess,
    limiter,
    clock,
    observer,
    maxBodyBytes: config.maxBodyBytes,
    shutdownSignal: shutdown.signal,
    authorize,
    stalls,
  });
  const page = loadOperatorPage();
  // The MCP face (`/mcp`): tool calls reach the same implementations through the same interceptors.
  const mcp = createMcpFace({
    call: inProcess,
    authenticate: authenticator.authenticate,
    refusals,
    corsOrigins: config.corsOrigins,
    limiter,
    clock,
    observer,
    maxBodyBytes: config.maxBodyBytes,
    maxSessions: config.mcpMaxSessions,
    idleMs: config.mcpSessionIdleMs,
    leaseTtlMaxMs: leaseTtl.maxMs,
    version: hubVersion(),
    shutdownSignal: shutdown.signal,
  });
  const handler = createHttpHandler({
    routes: serviceRoutes,
    interceptors,
    inProcess,
    wire,
    readMaxBytes,
    maxBodyBytes: config.maxBodyBytes,
    shutdownSignal: shutdown.signal,
    corsOrigins: config.corsOrigins,
    openLoopback: isLoopback(config.host) && config.authToken === undefined,
    observer,
    ops: createOpsRoutes({ store, metrics, admin: metricsAdmin }),
    ...(page && { page }),
    mcp: mcp.handle,
    rest,
    stalls,
  });
  const dual = createDualServer(handler, rest.rawRefusal, tlsMaterial && { tls: tlsServerOptions(tlsMaterial) });
  /** Stops polling the TLS files for a new certificate (set while listening). */
  let stopTlsWatch: (() => void) | undefined;
  if (!page) observer.log("operator_page_missing", { dir: defaultPageDir, fix: "npm run build:ui" });
  const sweeper = createSweeper({
    presence,
    leases,
    messages,
    purgeChanges: (limit) => store.changes.purgeChanges(changeRetention.ms, changeRetention.perStream, limit),
    limiter,
    clock,
    observer,
    intervalMs: config.cleanupIntervalMs,
    agentRetentionMs: config.agentRetentionMs,
    expireIdleSessions: mcp.expireIdle,
    noteExpiredTokens: projectTokens.noteExpired,
    purgeAudit: audit.purge,
    pruneRefusals: (nowMs) => {
      refusals.prune(nowMs);
      audit.prune(nowMs);
    },
    endStalledStreams: stalls.check,
  });

  // A restart makes everybody offline until they call again. Not with replicas: the others still
  // serve those agents, and presence lapses by itself (stale-after) for the ones that are gone.
  if (store.storage !== "postgres") {
    try {
      await presence.markAllOffline();
      await store.leases.clearLeaseWaiters(); // the calls that waited went with the process
    } catch (e) {
      // The first writes of a start: a store SQLite opened but cannot write (a full disk, a
      // read-only mount) is refused here as one that cannot be opened, not as a fault (the
      // process ends with the refusal, and the store's lock with it).
      throw asOpenRefusal(e, config.dataPath);
    }
  } else {
    // The calls that replicas gone since (this one before a crash, among them) left waiting for
    // leases: nobody will answer them (D79). A hand-over passes them over anyway; this clears the
    // queues the views show. Not a reason to refuse the start.
    await leases
      .dropOrphanedWaiters()
      .then((n) => n > 0 && observer.log("lease_waiters_dropped", { leases: n, reason: "replica_gone" }))
      .catch((e: unknown) => observer.log("lease_waiters_drop_failed", { error: (e as Error).message }));
  }

  let closing: Promise<void> | undefined;
  return {
    server: dual.server,
    clock,
    store,
    observer,
    /** The wire switch (config `wire`), read on each request: "connect" serves every call through connect. */
    wire,
    /** Runs one sweep now (tests call this instead of waiting for the timer). */
    sweepNow: sweeper.runNow,

    /** Listens on the configured host and port; resolves with the base URL (`https://` with TLS). */
    async listen(): Promise<{ url: string; port: number }> {
      await new Promise<void>((resolve, reject) => {
        dual.server.once("error", reject);
        dual.server.listen(config.port, config.host, () => {
          dual.server.off("error", reject);
          resolve();
        });
      });
      sweeper.start();
      if (tlsFiles && tlsMaterial && !stopTlsWatch) {
        const tlsServer = dual.tlsServer!;
        stopTlsWatch = watchTlsFiles({
          files: tlsFiles,
          current: tlsMaterial,
          intervalMs: config.tlsReloadIntervalMs,
          apply: (m) => tlsServer.setSecureContext(secureContextOptions(m)),
          observer,
        });
      }
      const { port } = dual.server.address() as AddressInfo;
      const host = config.host.includes(":") ? `[${config.host}]` : config.host;
      return { url: `${tlsMaterial ? "https" : "http"}://${host}:${port}`, port };
    },

    /**
     * Graceful shutdown: stop the sweep, end every stream, stop listening, let unary calls
     * finish, force-close after the grace time, close the store.
     */
    close(): Promise<void> {
      closing ??= (async () => {
        const startedAtMs = performance.now();
        await sweeper.stop();
        stopTlsWatch?.();
        // Streams end with `unavailable` and new calls are refused, on every connection.
        shutdown.abort(toConnectError(errors.hubShuttingDown()));
        // MCP sessions close once their calls under way are answered, while the port drains.
        const mcpClosed = mcp.close();
        const listening = dual.server.listening;
        dual.closeGracefully();
        let forced = false;
        if (listening) {
          // The grace time is a ceiling: the hub stops as soon as the last connection is gone.
          await new Promise<void>((resolve) => {
            const force = setTimeout(() => {
              forced = true;
              dual.closeAll();
              resolve();
            }, config.shutdownGraceMs);
            force.unref();
            dual.server.once("close", () => {
              clearTimeout(force);
              resolve();
            });
          });
        }
        // Forced: what was still under way was cut with its connection.
        if (forced) void mcpClosed.catch(() => undefined);
        else await mcpClosed;
        await prepare.close();
        stopInboxTail();
        stopChangeTail();
        await store.close();
        observer.log("hub_stopped", { forced, durationMs: Math.round(performance.now() - startedAtMs) });
        await hubLogger?.close();
      })();
      return closing;
    },
  };
}

export type Hub = Awaited<ReturnType<typeof createHub>>;
