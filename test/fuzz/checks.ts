// What every answer to a hostile request must look like (docs/api.md, Errors): never a 5xx (the
// documented 503 admin_auth_not_configured and Connect's 501 for an unknown encoding aside),
// never `internal`/`unknown`, REST refusals as `{error, code, requestId, ...}` with a JSON
// content type and a code from the table, RPC refusals with an ErrorInfo of domain kxm-hub whose
// reason is a table code; and a request that must be refused is refused with the expected code.
import { errorTable } from "../../src/errors.js";
import type { Checked, Violation } from "./harness.js";
import type { RawRequest, RawResponse } from "./raw.js";
import type { RpcAnswer, RpcProtocol } from "./rpc-wire.js";

const table = errorTable as Record<string, { connect: string; rest: number }>;

export interface Expectation {
  /** The hub must refuse it (a 2xx or an ok call is a violation). */
  mustRefuse: boolean;
  /** Acceptable codes (REST `code`, or the RPC Connect code) when refused. */
  codes?: readonly string[];
  /** Acceptable ErrorInfo reasons (RPC). */
  reasons?: readonly string[];
  /** RPC: an answer with exactly this HTTP status is the expected refusal (e.g. 505). */
  httpStatus?: number;
}

/** One line that identifies a raw request, for counterexamples and the survey. */
export function describeRequest(transport: string, req: RawRequest): string {
  const body = req.body ? Buffer.from(req.body) : undefined;
  const shown = body ? JSON.stringify(body.subarray(0, 160).toString("latin1")) + (body.length > 160 ? `…(${body.length} bytes)` : "") : "none";
  const shownHeaders = req.headers.length > 12 ? [...req.headers.slice(0, 8), ["…", `${req.headers.length - 8} more headers`]] : req.headers;
  const text = (v: string) => (/[\u0000-\u001f]/.test(v) ? JSON.stringify(v) : v);
  const headers = shownHeaders.map(([k, v]) => `${text(k)}: ${v.length > 60 ? `${text(v.slice(0, 60))}…(${v.length})` : text(v)}`).join(" | ");
  return `${transport} ${req.method} ${JSON.stringify(req.path.length > 200 ? `${req.path.slice(0, 200)}…` : req.path)} [${headers}] body=${shown}`;
}

const firstLine = (s: string | undefined) => (s ?? "").split("\n")[0].slice(0, 160);

function noAnswer(r: RawResponse): string | undefined {
  if (r.outcome === "crash") return `hub crashed (uncaught: ${firstLine(r.detail)})`;
  if (r.outcome === "timeout") return "no answer (timeout)";
  if (r.outcome === "reset") return `no answer (${firstLine(r.detail)})`;
  return undefined;
}

/** Checks one REST-face answer. `where` names the route (or path shape), `label` the hostility. */
export function checkRest(where: string, label: string, r: RawResponse, e: Expectation, repro: string): Checked {
  const problems: string[] = [];
  const lost = noAnswer(r);
  if (lost) problems.push(lost);
  else if (r.status === -2) return { violations: [], accepted: false }; // our HTTP/2 client would not send it
  else {
    let body: Record<string, unknown> | undefined;
    let code: string | undefined;
    if (r.status >= 400) {
      const ct = r.headers["content-type"] ?? "";
      try {
        const parsed: unknown = JSON.parse(r.body.toString("utf8"));
        if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) body = parsed as Record<string, unknown>;
      } catch {
        // not JSON: reported below
      }
      code = typeof body?.code === "string" ? body.code : undefined;
      if (!body) problems.push(`${r.status} without a JSON error body`);
      else {
        if (!/^application\/json\b/i.test(ct)) problems.push(`${r.status} error body with content-type ${ct || "(none)"}`);
        if (typeof body.error !== "string" || body.error === "") problems.push(`${r.status} error body without "error"`);
        if (code === undefined || !(code in table)) problems.push(`${r.status} error body with undocumented code ${JSON.stringify(body.code)}`);
        else if (table[code].rest !== r.status && !(r.status === 431 && code === "protocol_error")) {
          // 431 protocol_error: a header section over Node's limit (docs/api.md, Hostile input).
          problems.push(`${code} answered ${r.status}, docs/api.md says ${table[code].rest}`);
        }
        if (typeof body.requestId !== "string" || body.requestId === "") problems.push(`${r.status} error body without requestId`);
        else if (r.headers["x-request-id"] !== body.requestId) problems.push("requestId differs from the x-request-id header");
      }
    }
    const documented503 = r.status === 503 && code === "admin_auth_not_configured";
    if (r.status >= 500 && !documented503) problems.push(`answered ${r.status} ${code ?? ""}`.trim());
    if (e.mustRefuse && r.status < 400) problems.push(`accepted (${r.status})`);
    else if (r.status >= 500) {
      // reported above
    } else if (e.mustRefuse && e.codes && code !== undefined && !e.codes.includes(code)) problems.push(`answered ${code} (${r.status}), expected ${e.codes.join("|")}`);
  }
  const violations: Violation[] = problems.map((p) => ({
    signature: `REST ${where} [${label}] → ${p}`,
    detail: `${repro} => ${r.outcome === "answered" ? `${r.status} ${r.body.subarray(0, 240).toString("utf8")}` : r.outcome}`,
  }));
  return { violations, accepted: !e.mustRefuse && r.outcome === "answered" && r.status >= 200 && r.status < 300 };
}

/** Checks one RPC answer, read by readAnswer. */
export function checkRpc(p: RpcProtocol, where: string, label: string, a: RpcAnswer, r: RawResponse, e: Expectation, repro: string): Checked {
  const problems: string[] = [];
  const lost = noAnswer(r);
  if (lost) problems.push(lost);
  else if (r.status === -2 || (e.httpStatus !== undefined && r.status === e.httpStatus)) return { violations: [], accepted: false };
  else if (a.kind === "unreadable") problems.push(`unreadable answer (HTTP ${a.http}: ${firstLine(a.message)})`);
  else if (a.kind === "error") {
    const code = a.code ?? "?";
    if (code === "internal" || code === "unknown" || code === "data_loss") problems.push(`code ${code}`);
    else if (a.http >= 500 && !(code === "unimplemented" && p.kind === "connect")) problems.push(`HTTP ${a.http} (${code})`);
    if (a.reason === undefined) {
      if (code !== "unimplemented" && code !== "internal" && code !== "unknown") problems.push(`${code} without ErrorInfo`);
    } else {
      const row = table[a.reason.toLowerCase()];
      if (a.domain !== "kxm-hub") problems.push(`ErrorInfo domain ${a.domain}`);
      if (!row || a.reason !== a.reason.toUpperCase()) problems.push(`ErrorInfo reason ${a.reason} not in the error table`);
      else if (row.connect !== code) problems.push(`ErrorInfo ${a.reason} with code ${code}, docs/api.md says ${row.connect}`);
    }
    if (code === "internal" || code === "unknown") {
      // reported above
    } else if (e.mustRefuse && e.codes && !e.codes.includes(code)) problems.push(`code ${code}, expected ${e.codes.join("|")}`);
    else if (e.mustRefuse && e.reasons && a.reason !== undefined && !e.reasons.includes(a.reason)) problems.push(`reason ${a.reason}, expected ${e.reasons.join("|")}`);
  } else if (e.mustRefuse && a.kind === "ok") problems.push(r.streamOpened ? "accepted (stream opened)" : "accepted");
  const violations: Violation[] = [...new Set(problems)].map((problem) => ({
    signature: `RPC ${p.name} ${where} [${label}] → ${problem}`,
    detail: `${repro} => ${a.kind} ${a.code ?? ""} ${a.reason ?? ""} ${firstLine(a.message)} (HTTP ${a.http})`,
  }));
  return { violations, accepted: !e.mustRefuse && a.kind === "ok" };
}
