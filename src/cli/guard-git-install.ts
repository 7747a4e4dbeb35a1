import fs from "node:fs";
import path from "node:path";
import { agentTarget, parseFlags, write } from "./agent-target.js";
import { CommandError, exitCodes, usageError } from "./command-error.js";
import { gitDirOf, hooksDirOf, isBare, setConfig } from "./guard-git-repo.js";
import { parseRule, RuleError } from "./guard-git-rules.js";
import { guardTlsKeys } from "./guard-git.js";
import { tlsFlags, type TlsFlag } from "./tls-client.js";
import { packagePath } from "../package-root.js";

/** `kxm-hub guard git --install <repo> ...`: makes a repository run the guard as its pre-receive hook. */

/** The line that marks a hook as written by --install, which may then replace it. */
const marker = "# Written by kxm-hub guard git --install";

const bin = packagePath("bin", "kxm-hub.mjs");

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The hook: this node running this checkout's kxm-hub, so it works whatever PATH git runs it with. */
const hookScript = () => `#!/bin/sh
${marker}: refuses pushes to refs protected by git config kxm.protect
# unless they carry a current fencing token (kxm-hub guard git --help).
exec ${shellQuote(process.execPath)} ${shellQuote(bin)} guard git
`;

/** Writes the hook (through a rename), refusing to replace one it did not write. */
function writeHook(hooksDir: string): string {
  const hook = path.join(hooksDir, "pre-receive");
  let existing: string | undefined;
  try {
    existing = fs.readFileSync(hook, "utf8");
  } catch {
    existing = undefined;
  }
  if (existing !== undefined && !existing.includes(marker)) {
    throw new CommandError("hook_exists", `${hook} exists and was not written by kxm-hub guard git --install; remove it or call kxm-hub guard git from it`, exitCodes.refused);
  }
  fs.mkdirSync(hooksDir, { recursive: true });
  const temp = `${hook}.${process.pid}.tmp`;
  fs.writeFileSync(temp, hookScript(), { mode: 0o755 });
  fs.renameSync(temp, hook);
  return hook;
}

/** See guardGitHelp (guard-git.ts), which guard-git.ts prints for --help. Throws usage_error (2), not_a_git_repository, hook_exists, guard_install_failed (1). */
export async function guardGitInstall(argv: string[]): Promise<void> {
  const { values, positionals } = parseFlags(argv, {
    install: { type: "string" },
    url: { type: "string" },
    token: { type: "string" },
    project: { type: "string" },
    protect: { type: "string", multiple: true },
    "tls-ca": { type: "string" },
    "tls-client-cert": { type: "string" },
    "tls-client-key": { type: "string" },
  });
  if (values.install === undefined) throw usageError("kxm-hub guard git takes no arguments as a hook; to install it: --install <repo> (see --help)");
  if (positionals.length > 0) throw usageError(`unexpected argument(s) ${positionals.join(" ")}; see kxm-hub guard git --help`);
  const rules = (values.protect as string[] | undefined) ?? [];
  if (rules.length === 0) throw usageError("at least one --protect <ref pattern>=<lease pattern> is required, e.g. --protect 'refs/heads/*=repo/*'");
  for (const rule of rules) {
    try {
      parseRule(rule);
    } catch (e) {
      if (e instanceof RuleError) throw usageError(`--protect ${e.message}`);
      throw e;
    }
  }
  // A --url with a user name or password is refused here (agentTarget), as for every command.
  const target = agentTarget(values, false);

  const gitDir = gitDirOf(path.resolve(values.install as string));
  const hooksDir = hooksDirOf(gitDir);
  const hook = writeHook(hooksDir);
  // Pinned in the repository's own config, which wins over the pushing user's and the system's:
  // a core.hooksPath there (a hook manager's, say) would otherwise have git run no guard at all.
  // Relative in a bare repository (push hooks run in its git directory), so that it moves with it.
  setConfig(gitDir, "core.hooksPath", [isBare(gitDir) ? path.relative(gitDir, hooksDir) || "." : hooksDir]);
  setConfig(gitDir, "receive.advertisePushOptions", ["true"]);
  setConfig(gitDir, "kxm.url", [target.url.href.replace(/\/+$/, "")]);
  setConfig(gitDir, "kxm.token", target.token === undefined ? [] : [target.token]);
  setConfig(gitDir, "kxm.project", [target.project]);
  setConfig(gitDir, "kxm.protect", rules);
  // The files as given (flag or variable), absolute: agentTarget has checked that they can be used.
  for (const [flag, key] of Object.entries(guardTlsKeys) as [TlsFlag, string][]) {
    const file = ((values[flag] as string | undefined) ?? process.env[tlsFlags[flag].env])?.trim();
    setConfig(gitDir, key, file ? [path.resolve(file)] : []);
  }
  await write(`installed ${hook}: ${rules.join(", ")} of project ${target.project} at ${target.url.origin}\n`);
}
