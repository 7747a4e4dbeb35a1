import { spawnSync } from "node:child_process";
import path from "node:path";
import { CommandError, exitCodes } from "./command-error.js";

/** What `kxm-hub guard git` asks of git itself: where the repository is, and its config. */

/** Runs git; answers its status and stdout. Throws CommandError when git cannot be started. */
export function git(args: string[], cwd?: string, env?: NodeJS.ProcessEnv): { status: number; stdout: string; stderr: string } {
  const r = spawnSync("git", args, { cwd, env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  if (r.error) throw new CommandError("git_unavailable", `cannot run git: ${r.error.message}`, exitCodes.refused);
  return { status: r.status ?? 1, stdout: r.stdout, stderr: r.stderr };
}

/** The absolute git directory of the repository at `dir` (the current one, GIT_DIR, by default). */
export function gitDirOf(dir?: string): string {
  const r = git(["rev-parse", "--absolute-git-dir"], dir);
  if (r.status !== 0) {
    throw new CommandError("not_a_git_repository", `${dir ?? process.cwd()} is not a git repository: ${r.stderr.trim()}`, exitCodes.refused);
  }
  return r.stdout.trim();
}

/**
 * Every value of `key` in the repository's config, in order. `local`: its own config only (not
 * the pushing user's, nor the system's, which the repository does not choose).
 */
export function configValues(gitDir: string, key: string, local = false): string[] {
  const r = git(["--git-dir", gitDir, "config", ...(local ? ["--local"] : []), "-z", "--get-all", key]);
  // 1: the key is not set.
  if (r.status === 1) return [];
  if (r.status !== 0) throw new CommandError("guard_misconfigured", `git config --get-all ${key} failed: ${r.stderr.trim()}`, exitCodes.refused);
  return r.stdout.split("\0").slice(0, -1);
}

/** The last value of `key`, or undefined when it is unset or blank. */
export function configValue(gitDir: string, key: string): string | undefined {
  const v = configValues(gitDir, key).at(-1)?.trim();
  return v === "" ? undefined : v;
}

/** Sets `key` in the repository's own config to `values`, replacing what it had; none unsets it. */
export function setConfig(gitDir: string, key: string, values: string[]): void {
  const unset = git(["--git-dir", gitDir, "config", "--local", "--unset-all", key]);
  // 5: the key was not set.
  if (unset.status !== 0 && unset.status !== 5) throw new CommandError("guard_install_failed", `git config --unset-all ${key}: ${unset.stderr.trim()}`, exitCodes.refused);
  for (const v of values) {
    const r = git(["--git-dir", gitDir, "config", "--local", "--add", key, v]);
    if (r.status !== 0) throw new CommandError("guard_install_failed", `git config --add ${key}: ${r.stderr.trim()}`, exitCodes.refused);
  }
}

/**
 * The repository's own hooks directory, absolute: its own core.hooksPath when its config sets
 * one, else `hooks` in its git directory. Never one the installing user's or the system's config
 * names: such a directory is shared by every repository of theirs (the hook would refuse their
 * pushes everywhere) and is not the one another user's git runs (pushes would go unguarded).
 */
export function hooksDirOf(gitDir: string): string {
  const ownConfigOnly = { ...process.env, GIT_CONFIG_GLOBAL: "/dev/null", GIT_CONFIG_NOSYSTEM: "1" };
  const r = git(["--git-dir", gitDir, "rev-parse", "--git-path", "hooks"], gitDir, ownConfigOnly);
  if (r.status !== 0) throw new CommandError("guard_install_failed", `cannot find the hooks directory: ${r.stderr.trim()}`, exitCodes.refused);
  return path.resolve(gitDir, r.stdout.trim());
}

/** Whether the repository at `gitDir` is bare. */
export function isBare(gitDir: string): boolean {
  return git(["--git-dir", gitDir, "rev-parse", "--is-bare-repository"]).stdout.trim() === "true";
}

/**
 * The prefix git puts before a ref of the namespace `namespace` (GIT_NAMESPACE) in the
 * repository: `a/b` is `refs/namespaces/a/refs/namespaces/b/`. Empty without one.
 */
export function namespacePrefix(namespace: string | undefined): string {
  return (namespace ?? "")
    .split("/")
    .filter((part) => part !== "")
    .map((part) => `refs/namespaces/${part}/`)
    .join("");
}

/**
 * The ref the symbolic ref `ref` points to, whether that one exists yet or not (a push through
 * `refs/heads/rel -> refs/heads/release` creates release), or undefined when `ref` is no
 * symbolic ref. `ref` and the answer are as the hook sees them: inside the push's namespace
 * (`prefix`, namespacePrefix), which `git symbolic-ref` itself does not apply. Throws
 * CommandError when git cannot tell, so the push is refused.
 */
export function symbolicTarget(gitDir: string, ref: string, prefix: string): string | undefined {
  const r = git(["--git-dir", gitDir, "symbolic-ref", "-q", `${prefix}${ref}`]);
  // 1: not a symbolic ref (a plain one, or none).
  if (r.status === 1) return undefined;
  if (r.status !== 0) throw new CommandError("guard_misconfigured", `git symbolic-ref ${prefix}${ref} failed: ${r.stderr.trim()}`, exitCodes.refused);
  const target = r.stdout.trim();
  return target.startsWith(prefix) ? target.slice(prefix.length) : target;
}
