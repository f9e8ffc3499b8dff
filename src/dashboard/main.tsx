/**
 * The web dashboard's entry (docs/dashboard.md): sign-in with an API key, then the operator's
 * dashboard (operator.tsx) for an operator's key, or a team's view (its services and proto
 * packages) for any other key of an organization.
 */
import { render } from "preact";
import { useCallback, useState } from "preact/hooks";
import { checkKey, type Scope, scope, session } from "./api.ts";
import { Dashboard } from "./operator.tsx";
import { Protos } from "./protos.tsx";
import { Services } from "./services.tsx";

function App() {
  const [key, setKey] = useState(session.get());
  const [who, setWho] = useState(scope.get());
  const [message, setMessage] = useState<string | null>(null);
  const logout = useCallback((why: string | null) => {
    session.clear();
    setKey(null);
    setMessage(why);
  }, []);
  if (!key || !who)
    return (
      <Login
        message={message}
        onLogin={(k, s) => {
          session.set(k);
          scope.set(s);
          setMessage(null);
          setWho(s);
          setKey(k);
        }}
      />
    );
  return who.operator ? <Dashboard onLogout={logout} /> : <TeamDashboard org={who.org} onLogout={logout} />;
}

/** A team's view (any key of an organization that is not an operator's): its services and proto packages. */
function TeamDashboard(props: { org: string; onLogout: (why: string | null) => void }) {
  return (
    <main data-testid="team-dashboard">
      <header>
        <h1>platform</h1>
        <span class="hint">organization {props.org}</span>
        <button type="button" class="link" onClick={() => props.onLogout(null)}>
          Sign out
        </button>
      </header>
      <Services />
      <Protos />
    </main>
  );
}

function Login(props: { message: string | null; onLogin: (key: string, scope: Scope) => void }) {
  const [error, setError] = useState(props.message);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    const key = String(new FormData(e.currentTarget as HTMLFormElement).get("key") ?? "").trim();
    if (!key) return setError("Enter an API key.");
    setBusy(true);
    try {
      props.onLogin(key, await checkKey(key));
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="login">
      <h1>platform</h1>
      <form onSubmit={submit} data-testid="login">
        <label>
          API key
          <input name="key" type="password" autocomplete="off" placeholder="sk-plat-…" autofocus />
        </label>
        <button type="submit" disabled={busy}>
          Sign in
        </button>
        <p class="hint">
          Kept in this tab only (sessionStorage) and sent as a Bearer token to this gateway's management API. An
          operator's key shows everything; another key its organization's services and proto packages.
        </p>
        {error && (
          <p class="error" role="alert" data-testid="login-error">
            {error}
          </p>
        )}
      </form>
    </main>
  );
}

const root = document.getElementById("app");
if (root) {
  root.textContent = "";
  render(<App />, root);
}
