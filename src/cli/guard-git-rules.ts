/**
 * The rules `kxm-hub guard git` protects refs by: git config `kxm.protect`, multi-valued, each
 * `<ref pattern>=<lease pattern>`. Pure: parsing and matching, nothing read or written.
 *
 * - A ref pattern is a full ref name (`refs/heads/main`) or one with a single `*`
 *   (`refs/heads/*`, `refs/heads/release/*`, `refs/tags/v*`). `*` matches one or more characters,
 *   `/` included, as in a git refspec: `refs/heads/*` covers `refs/heads/feature/x`.
 * - A lease pattern is a lease name of the project; a `*` in it (at most one, and only when the
 *   ref pattern has one) is replaced by what the ref's `*` matched: `refs/heads/*=repo/*` guards
 *   `refs/heads/main` with lease `repo/main`. Without a `*` every matching ref shares one lease.
 * - The first `=` splits the rule (a ref pattern cannot hold `=`); spaces around either side are
 *   trimmed. Rules are tried in the order git config lists them; the first that matches wins. A
 *   ref no rule matches is not protected.
 */

export interface ProtectRule {
  /** The rule as configured, for messages. */
  source: string;
  refPattern: string;
  leasePattern: string;
}

export class RuleError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RuleError";
  }
}

const stars = (s: string) => s.split("*").length - 1;

/**
 * Why `ref` cannot be a ref name (git check-ref-format's rules), or undefined: a pattern that no
 * ref can match (a typo such as `refs/heads/release-[0-9]*`) would leave its refs unprotected
 * without a word.
 */
function refFormatFault(ref: string): string | undefined {
  if (/[\u0000-\u0020\u007f~^:?*[\\]/.test(ref)) return "a space, control character or one of ~ ^ : ? * [ \\";
  if (ref.includes("..") || ref.includes("@{") || ref.includes("//")) return "'..', '@{' or '//'";
  if (ref.endsWith("/") || ref.endsWith(".")) return "a trailing '/' or '.'";
  if (ref.split("/").some((part) => part.startsWith(".") || part.endsWith(".lock"))) return "a component starting with '.' or ending with '.lock'";
  return undefined;
}

/** Parses one `kxm.protect` value. Throws RuleError saying what is wrong with it. */
export function parseRule(raw: string): ProtectRule {
  const at = raw.indexOf("=");
  const source = JSON.stringify(raw);
  if (at < 0) throw new RuleError(`rule ${source} is not <ref pattern>=<lease pattern>, e.g. refs/heads/*=repo/*`);
  const refPattern = raw.slice(0, at).trim();
  const leasePattern = raw.slice(at + 1).trim();
  if (!refPattern.startsWith("refs/") || refPattern.length <= "refs/".length) {
    throw new RuleError(`rule ${source}: the ref pattern must be a full ref name starting with refs/, e.g. refs/heads/main or refs/heads/*`);
  }
  if (leasePattern === "") throw new RuleError(`rule ${source}: the lease pattern is empty`);
  if (stars(refPattern) > 1) throw new RuleError(`rule ${source}: the ref pattern may hold one * at most`);
  if (stars(leasePattern) > 1) throw new RuleError(`rule ${source}: the lease pattern may hold one * at most`);
  if (stars(leasePattern) === 1 && stars(refPattern) === 0) {
    throw new RuleError(`rule ${source}: the lease pattern has a * but the ref pattern has none to fill it`);
  }
  const unmatchable = refFormatFault(refPattern.replace("*", "x"));
  if (unmatchable) throw new RuleError(`rule ${source}: no ref name can match the ref pattern (${unmatchable}), so it would protect nothing`);
  return { source: raw, refPattern, leasePattern };
}

/** What `pattern` matches of `ref`: "" for an exact match, the `*` part for a glob, undefined for none. */
function matchRef(pattern: string, ref: string): string | undefined {
  const star = pattern.indexOf("*");
  if (star < 0) return pattern === ref ? "" : undefined;
  const prefix = pattern.slice(0, star);
  const suffix = pattern.slice(star + 1);
  if (ref.length <= prefix.length + suffix.length || !ref.startsWith(prefix) || !ref.endsWith(suffix)) return undefined;
  return ref.slice(prefix.length, ref.length - suffix.length);
}

/** The lease guarding `ref` under the first rule that matches it, or undefined: `ref` is not protected. */
export function leaseFor(rules: readonly ProtectRule[], ref: string): { rule: ProtectRule; lease: string } | undefined {
  for (const rule of rules) {
    const matched = matchRef(rule.refPattern, ref);
    if (matched !== undefined) return { rule, lease: rule.leasePattern.replace("*", () => matched) };
  }
  return undefined;
}
