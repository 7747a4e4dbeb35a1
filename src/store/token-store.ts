import type { ChangeRecord } from "./change-feed.js";
import type { AuditRecord, AuditRow, ProjectTokenRow } from "../domain.js";

/**
 * The credentials concern of the store: project tokens and the audit trail. Each backend
 * implements it in one file (sqlite/tokens.ts, postgres/tokens.ts); the auth domain takes only
 * this interface.
 */

/** A token decision: the row it writes, the change open streams hear of, the audit entry, the answer. */
export interface TokenDecision<T> {
  write?: ProjectTokenRow;
  change?: ChangeRecord;
  audit?: AuditRecord;
  result: T;
}

export interface AuditQuery {
  /** Only this project's entries; undefined: every entry. */
  project?: string;
  /** Entries numbered below this (paging back); undefined: from the newest. */
  beforeSeq?: number;
  limit: number;
}

export interface TokenStore {
  /**
   * One decision on one token of a project, in one transaction: `current` is the stored row of
   * `id` (undefined when there is none; it may be another project's: the decision checks),
   * `live` the number of `project`'s tokens neither revoked nor expired at `nowMs`. On a shared store the project's
   * tokens are locked first, so two hubs deciding at once cannot both pass a limit.
   */
  decideToken<T>(
    project: string,
    id: string,
    decide: (current: ProjectTokenRow | undefined, live: number, nowMs: number) => TokenDecision<T>,
  ): Promise<T>;
  /**
   * A token by id as committed so far, without waiting for a batch to be durable: what
   * authentication reads on every call. A refusal read here is confirmed with getToken.
   */
  peekToken(id: string): Promise<ProjectTokenRow | undefined>;
  /** A token by id, once every commit made so far is durable. */
  getToken(id: string): Promise<ProjectTokenRow | undefined>;
  /** A project's tokens, newest first. */
  listTokens(project: string, limit: number): Promise<ProjectTokenRow[]>;
  /**
   * True when the project has, or ever had, a token of its own in the store. `durable`: only
   * what is durable counts (a refusal's ground); else a quick answer without waiting, which may
   * say yes for a row not (or not yet) durable but never says no for one that is.
   */
  projectHasTokens(project: string, durable: boolean): Promise<boolean>;
  /**
   * Notes each token past its expiry whose expiry is not noted yet, one transaction each: marks
   * it, records its change and its audit entry. Returns the tokens noted here.
   */
  noteExpiredTokens(note: (row: ProjectTokenRow, nowMs: number) => { change: ChangeRecord; audit: AuditRecord }): Promise<ProjectTokenRow[]>;

  /** Appends entries to the audit trail, in one transaction. */
  appendAudit(records: AuditRecord[]): Promise<void>;
  /** Entries newest first. */
  listAudit(query: AuditQuery): Promise<AuditRow[]>;
  /** Deletes the entries older than `retainMs`, and all but the newest `keep`; returns how many. */
  purgeAudit(retainMs: number, keep: number): Promise<number>;
}
