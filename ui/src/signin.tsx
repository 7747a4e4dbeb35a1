// Signing in by hand: a token (the admin's, or a project's with its name); the hub's refusal
// is shown as what the token is not.
import { useState } from "preact/hooks";
import { refusalText, signIn, type Session } from "./session.js";

export function SignIn({ message, onSignedIn }: { message?: string; onSignedIn: (s: Session) => void }) {
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
