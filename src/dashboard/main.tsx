/**
 * The web dashboard (README "Dashboard"): endpoints, A/B tests, live traffic charts, models with
 * their evaluation results, batch jobs,
 * scaling decisions, API keys, CLI tokens, deployed services (services.tsx) and proto packages
 * (protos.tsx), and the actions to change them. It holds no state on the server: it polls the
 * management API and /metrics every 2 s with the admin key the user gave, and every action is one
 * call to the same API the CLI uses.
 */
import { render } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import {
  ApiError,
  type AbTest,
  type ApiKey,
  type Autoscaling,
  type BatchJob,
  type CliToken,
  type EndpointStatus,
  type EvaluatedTarget,
  type EvaluationResult,
  type ModelVersion,
  api,
  checkKey,
  type Scope,
  scope,
  scrapeMetrics,
  session,
} from "./api.ts";
import { Chart, format, HISTORY, LatencyChart } from "./chart.tsx";
import { type Point, type Scrape, parseMetrics, pointBetween, sumFor } from "./metrics.ts";
import { Protos } from "./protos.tsx";
import { Services } from "./services.tsx";

const POLL_MS = 2_000;

type Data = {
  endpoints: EndpointStatus[];
  abtests: Record<string, AbTest>;
  autoscaling: Record<string, Autoscaling>;
  batches: BatchJob[];
  models: ModelVersion[];
  evaluations: EvaluatedTarget[];
  keys: ApiKey[];
  tokens: CliToken[];
};

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

function Dashboard(props: { onLogout: (why: string | null) => void }) {
  const [data, setData] = useState<Data | null>(null);
  // An action's error stays until the next action; a failed refresh clears itself on the next
  // good one. One state for both let every 2 s refresh wipe an action's error before it was read.
  const [error, setError] = useState<string | null>(null);
  const [loadError, setLoadError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const history = useRef(new Map<string, Point[]>());
  const totals = useRef(new Map<string, number>());
  const lastScrape = useRef<Scrape | null>(null);
  const [, setTick] = useState(0);

  const fail = useCallback(
    (err: unknown) => {
      if (err instanceof ApiError && (err.status === 401 || err.status === 403))
        props.onLogout(`Signed out: ${err.message}`);
      else setLoadError((err as Error).message);
    },
    [props.onLogout],
  );

  const refresh = useCallback(async () => {
    try {
      const [endpoints, metrics, batches, models, evaluations, keys, tokens] = await Promise.all([
        api<{ data: EndpointStatus[] }>("GET", "/admin/v1/endpoints"),
        scrapeMetrics(),
        api<{ data: BatchJob[] }>("GET", "/v1/batch-jobs?limit=20"),
        api<{ data: ModelVersion[] }>("GET", "/admin/v1/models"),
        // A gateway without evaluations must not blank the page.
        api<{ data: EvaluatedTarget[] }>("GET", "/admin/v1/evaluations/results").catch(() => ({ data: [] })),
        api<{ data: ApiKey[] }>("GET", "/admin/v1/keys"),
        api<{ data: CliToken[] }>("GET", "/admin/v1/tokens"),
      ]);
      const primaries = endpoints.data.filter((e) => !e.variant_of);
      const perEndpoint = await Promise.all(
        primaries.map(async (e) => {
          const name = encodeURIComponent(e.endpoint);
          // One endpoint deleted between the list and these reads must not blank the page.
          const [ab, scaling] = await Promise.all([
            api<AbTest>("GET", `/admin/v1/endpoints/${name}/abtest`).catch(() => undefined),
            api<Autoscaling>("GET", `/admin/v1/endpoints/${name}/autoscaling`).catch(() => undefined),
          ]);
          return [e.endpoint, ab, scaling] as const;
        }),
      );
      const scrape = parseMetrics(metrics, Date.now());
      const previous = lastScrape.current;
      for (const e of primaries) {
        totals.current.set(e.endpoint, sumFor(scrape, "platform_requests_total", e.endpoint));
        if (!previous) continue;
        const points = [...(history.current.get(e.endpoint) ?? []), pointBetween(previous, scrape, e.endpoint)].slice(
          -HISTORY,
        );
        history.current.set(e.endpoint, points);
      }
      lastScrape.current = scrape;
      setData({
        endpoints: endpoints.data,
        abtests: Object.fromEntries(perEndpoint.flatMap(([n, ab]) => (ab ? [[n, ab]] : []))),
        autoscaling: Object.fromEntries(perEndpoint.flatMap(([n, , s]) => (s ? [[n, s]] : []))),
        batches: batches.data,
        models: models.data,
        evaluations: evaluations.data,
        keys: keys.data,
        tokens: tokens.data,
      });
      setLoadError(null);
      setTick((t) => t + 1);
    } catch (err) {
      fail(err);
    }
  }, [fail]);

  useEffect(() => {
    void refresh();
    const timer = setInterval(() => void refresh(), POLL_MS);
    return () => clearInterval(timer);
  }, [refresh]);

  /** Runs one action, shows its outcome, and refreshes at once rather than at the next tick. */
  const act = useCallback(
    async (what: string, action: () => Promise<unknown>) => {
      setNotice(null);
      setError(null);
      try {
        await action();
        setNotice(`${what}: done`);
      } catch (err) {
        if (err instanceof ApiError && err.status === 401) return fail(err);
        setError(`${what}: ${(err as Error).message}`);
      }
      await refresh();
    },
    [fail, refresh],
  );

  return (
    <main>
      <header>
        <h1>platform</h1>
        <span class="hint">updates every 2 s</span>
        <button type="button" class="link" onClick={() => props.onLogout(null)}>
          Sign out
        </button>
      </header>
      {error && (
        <p class="error" role="alert" data-testid="error">
          {error}
        </p>
      )}
      {loadError && (
        <p class="error" role="alert" data-testid="load-error">
          Could not refresh: {loadError}
        </p>
      )}
      {notice && (
        <p class="notice" data-testid="notice">
          {notice}
        </p>
      )}
      {!data ? (
        <p>Loading…</p>
      ) : (
        <>
          <section>
            <h2>Endpoints</h2>
            {data.endpoints.filter((e) => !e.variant_of).length === 0 && (
              <p class="hint">No endpoint yet: deploy a registered model below.</p>
            )}
            {data.endpoints
              .filter((e) => !e.variant_of)
              .map((e) => (
                <EndpointCard
                  key={e.endpoint}
                  endpoint={e}
                  abtest={data.abtests[e.endpoint]}
                  scaling={data.autoscaling[e.endpoint]}
                  versions={data.models.filter((m) => m.name === e.model).map((m) => m.version)}
                  points={history.current.get(e.endpoint) ?? []}
                  total={totals.current.get(e.endpoint) ?? 0}
                  act={act}
                />
              ))}
          </section>
          <Deploy models={data.models} endpoints={data.endpoints} act={act} />
          <Models models={data.models} evaluations={data.evaluations} />
          <Batches jobs={data.batches} />
          <Keys keys={data.keys} act={act} />
          <Services />
          <Protos />
          <Tokens tokens={data.tokens} act={act} />
        </>
      )}
    </main>
  );
}

type Act = (what: string, action: () => Promise<unknown>) => Promise<void>;
const formOf = (e: Event) => new FormData(e.currentTarget as HTMLFormElement);
const text = (f: FormData, name: string) => String(f.get(name) ?? "").trim();
/** An optional positive integer field: empty means "not set". */
const optionalInt = (f: FormData, name: string): number | undefined =>
  text(f, name) === "" ? undefined : Number(text(f, name));

function EndpointCard(props: {
  endpoint: EndpointStatus;
  abtest?: AbTest;
  scaling?: Autoscaling;
  versions: string[];
  points: Point[];
  total: number;
  act: Act;
}) {
  const e = props.endpoint;
  const path = `/admin/v1/endpoints/${encodeURIComponent(e.endpoint)}`;
  const test = props.abtest?.abtest ?? null;
  const last = props.points.at(-1);
  const splitText = test ? test.split.map((v) => `${v.version}=${v.weight}`).join(",") : "";

  const setReplicas = (ev: Event) => {
    ev.preventDefault();
    const replicas = Number(text(formOf(ev), "replicas"));
    // The rest of the stored deployment goes back unchanged: PUT replaces the whole config.
    void props.act(`replicas of ${e.endpoint}`, () =>
      api("PUT", path, { ...e.config, resources: { ...e.config.resources, replicas } }),
    );
  };
  const setScaling = (ev: Event) => {
    ev.preventDefault();
    const f = formOf(ev);
    const current = props.scaling?.config ?? {};
    const autoscaling = {
      ...current,
      enabled: f.get("enabled") === "on",
      min_replicas: Number(text(f, "min")),
      max_replicas: Number(text(f, "max")),
      target_queue_depth: Number(text(f, "target")),
    };
    void props.act(`autoscaling of ${e.endpoint}`, () => api("PUT", `${path}/autoscaling`, { autoscaling }));
  };
  const setSplit = (ev: Event) => {
    ev.preventDefault();
    const split = text(formOf(ev), "split");
    void props.act(`${test ? "update" : "start"} A/B test on ${e.endpoint}`, () =>
      api("PUT", `${path}/abtest`, { split }),
    );
  };
  const stop = (ev: Event) => {
    ev.preventDefault();
    const keep = text(formOf(ev), "keep");
    void props.act(`stop A/B test on ${e.endpoint}`, () =>
      api("DELETE", `${path}/abtest${keep ? `?keep=${encodeURIComponent(keep)}` : ""}`),
    );
  };

  return (
    <article class="endpoint" data-testid={`endpoint-${e.endpoint}`}>
      <h3>
        {e.endpoint} <span class={`state ${e.state}`}>{e.state}</span>
      </h3>
      <dl class="facts">
        <dt>version</dt>
        <dd data-testid="version">
          {e.model}@{e.version}
        </dd>
        <dt>replicas ready/desired</dt>
        <dd data-testid="replicas">
          {e.replicas.ready}/{e.replicas.desired}
        </dd>
        <dt>queue waiting/running</dt>
        <dd data-testid="queue">
          {e.queue.waiting}/{e.queue.active}
        </dd>
        <dt>requests (since gateway start)</dt>
        <dd data-testid="requests-total">{props.total}</dd>
        <dt>requests/s</dt>
        <dd data-testid="requests-rate">{format(last?.requestsPerSecond ?? null)}</dd>
        <dt>A/B split</dt>
        <dd data-testid="split">{test ? `${splitText} (${test.state})` : "none"}</dd>
      </dl>
      {e.errors.length > 0 && <p class="error">{e.errors.join("; ")}</p>}
      {test && (
        <table class="variants" data-testid="variants">
          <thead>
            <tr>
              <th>version</th>
              <th>weight</th>
              <th>state</th>
              <th>replicas</th>
              <th>requests</th>
              <th>errors</th>
              <th>evaluations</th>
            </tr>
          </thead>
          <tbody>
            {props.abtest?.variants.map((v) => (
              <tr>
                <td>{v.version}</td>
                <td>{v.weight}</td>
                <td>{v.state}</td>
                <td>{v.replicas ? `${v.replicas.ready}/${v.replicas.desired}` : "–"}</td>
                <td>{v.stats?.requests ?? 0}</td>
                <td>{v.stats?.errors ?? 0}</td>
                <td>{evaluationText((v.evaluations ?? []).filter((r) => r.adapter === null))}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <div class="charts">
        <Chart
          testId="chart-rps"
          title="requests/s"
          unit=""
          slots={HISTORY}
          series={[{ label: "now", className: "a", values: props.points.map((p) => p.requestsPerSecond) }]}
        />
        <LatencyChart testId="chart-latency" points={props.points} />
        <Chart
          testId="chart-tokens"
          title="tokens/s"
          unit=""
          slots={HISTORY}
          series={[{ label: "now", className: "a", values: props.points.map((p) => p.tokensPerSecond) }]}
        />
        <Chart
          testId="chart-queue"
          title="queue depth"
          unit=""
          slots={HISTORY}
          series={[{ label: "now", className: "a", values: props.points.map((p) => p.queue) }]}
        />
      </div>
      <div class="actions">
        <form onSubmit={setReplicas} data-testid="replicas-form">
          <label>
            replicas{" "}
            <input name="replicas" type="number" min="0" max="64" defaultValue={String(e.replicas.desired)} required />
          </label>
          <button type="submit">Set replicas</button>
        </form>
        <form onSubmit={setScaling} data-testid="autoscaling-form">
          <label>
            <input name="enabled" type="checkbox" defaultChecked={props.scaling?.enabled ?? false} /> autoscale
          </label>
          <label>
            min{" "}
            <input
              name="min"
              type="number"
              min="0"
              max="64"
              defaultValue={String(props.scaling?.config?.min_replicas ?? 1)}
              required
            />
          </label>
          <label>
            max{" "}
            <input
              name="max"
              type="number"
              min="1"
              max="64"
              defaultValue={String(props.scaling?.config?.max_replicas ?? 4)}
              required
            />
          </label>
          <label>
            target queue/replica{" "}
            <input
              name="target"
              type="number"
              min="1"
              defaultValue={String(props.scaling?.config?.target_queue_depth ?? 4)}
              required
            />
          </label>
          <button type="submit">Set autoscaling</button>
        </form>
        <form onSubmit={setSplit} data-testid="abtest-form">
          <label>
            A/B split{" "}
            <input
              name="split"
              placeholder={`${e.version}=50,${props.versions.find((v) => v !== e.version) ?? "v2"}=50`}
              defaultValue={splitText}
              required
            />
          </label>
          <button type="submit">{test ? "Update A/B test" : "Start A/B test"}</button>
        </form>
        {test && (
          <form onSubmit={stop} data-testid="abtest-stop-form">
            <label>
              keep{" "}
              <select name="keep">
                {test.split.map((v) => (
                  <option value={v.version} selected={v.version === e.version}>
                    {v.version}
                  </option>
                ))}
              </select>
            </label>
            <button type="submit">Stop A/B test</button>
          </form>
        )}
      </div>
      <details>
        <summary>Recent scaling decisions</summary>
        <ul class="decisions" data-testid="decisions">
          {(props.scaling?.decisions ?? []).length === 0 && (
            <li class="hint">none recorded (autoscaling off, or no scaler tick yet)</li>
          )}
          {(props.scaling?.decisions ?? []).map((d) => (
            <li>
              {new Date(d.at).toLocaleTimeString()} <b>{d.action}</b> {d.from}→{d.to}: {d.reason}
            </li>
          ))}
        </ul>
      </details>
    </article>
  );
}

function Deploy(props: { models: ModelVersion[]; endpoints: EndpointStatus[]; act: Act }) {
  const names = [...new Set(props.models.map((m) => m.name))];
  const [model, setModel] = useState(names[0] ?? "");
  const versions = props.models.filter((m) => m.name === model).map((m) => m.version);
  const submit = (ev: Event) => {
    ev.preventDefault();
    const f = formOf(ev);
    const endpoint = text(f, "endpoint") || model;
    const version = text(f, "version");
    const replicas = Number(text(f, "replicas"));
    const existing = props.endpoints.find((e) => e.endpoint === endpoint);
    // Redeploying an endpoint keeps its other settings; a new one starts from the defaults.
    const body = existing
      ? {
          ...existing.config,
          model: { ...existing.config.model, name: model, version },
          resources: { ...existing.config.resources, replicas },
        }
      : { model: { name: model, version }, resources: { replicas } };
    void props.act(`deploy ${model}@${version} as ${endpoint}`, () =>
      api("PUT", `/admin/v1/endpoints/${encodeURIComponent(endpoint)}`, body),
    );
  };
  return (
    <section>
      <h2>Deploy a model version</h2>
      {names.length === 0 ? (
        <p class="hint">No model registered: platform training submit --name N --source SRC</p>
      ) : (
        <form class="row" onSubmit={submit} data-testid="deploy-form">
          <label>
            model{" "}
            <select name="model" value={model} onChange={(e) => setModel((e.currentTarget as HTMLSelectElement).value)}>
              {names.map((n) => (
                <option value={n}>{n}</option>
              ))}
            </select>
          </label>
          <label>
            version{" "}
            <select name="version">
              {[...versions].reverse().map((v) => (
                <option value={v}>{v}</option>
              ))}
              <option value="latest">latest</option>
            </select>
          </label>
          <label>
            endpoint <input name="endpoint" placeholder={model} pattern="[a-z0-9][a-z0-9._-]*" />
          </label>
          <label>
            replicas <input name="replicas" type="number" min="0" max="64" defaultValue="1" required />
          </label>
          <button type="submit">Deploy</button>
        </form>
      )}
    </section>
  );
}

/** "perplexity 12.3100 ± 0.4000 (n 200)", the latest per metric. */
function evaluationText(results: EvaluationResult[]): string {
  const latest = new Map<string, EvaluationResult>();
  for (const r of results) if ((latest.get(r.metric)?.finished ?? 0) < r.finished) latest.set(r.metric, r);
  const num = (v: number) =>
    Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : v.toFixed(4);
  return (
    [...latest.values()]
      .map((r) => `${r.metric} ${num(r.value)}${r.stderr === null ? "" : ` ± ${num(r.stderr)}`} (n ${r.n})`)
      .join("; ") || "–"
  );
}

/** Registered versions (adapters included) and their latest evaluation results (`platform training evaluate`). */
function Models(props: { models: ModelVersion[]; evaluations: EvaluatedTarget[] }) {
  const results = new Map(props.evaluations.map((t) => [t.target, t.results]));
  return (
    <section>
      <h2>Models</h2>
      {props.models.length === 0 ? (
        <p class="hint">No model registered.</p>
      ) : (
        <table data-testid="models">
          <thead>
            <tr>
              <th>model</th>
              <th>version</th>
              <th>framework</th>
              <th>evaluations</th>
            </tr>
          </thead>
          <tbody>
            {props.models.map((m) => (
              <tr>
                <td>{m.name}</td>
                <td>{m.version}</td>
                <td>{m.framework}</td>
                <td data-testid={`evaluations-${m.name}@${m.version}`}>
                  {evaluationText(results.get(`${m.name}@${m.version}`) ?? [])}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Batches(props: { jobs: BatchJob[] }) {
  return (
    <section>
      <h2>Batch jobs</h2>
      {props.jobs.length === 0 ? (
        <p class="hint">No batch job.</p>
      ) : (
        <table data-testid="batches">
          <thead>
            <tr>
              <th>id</th>
              <th>model</th>
              <th>state</th>
              <th>progress</th>
              <th>failed</th>
            </tr>
          </thead>
          <tbody>
            {props.jobs.map((j) => {
              const done = j.counts.succeeded + j.counts.failed;
              const share = j.counts.total > 0 ? done / j.counts.total : 0;
              return (
                <tr>
                  <td class="mono">{j.id}</td>
                  <td>
                    {j.model}@{j.version}
                  </td>
                  <td title={j.error?.message}>{j.state}</td>
                  <td>
                    <progress max={1} value={share} /> {done}/{j.counts.total || "?"}
                  </td>
                  <td>{j.counts.failed}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}

function Keys(props: { keys: ApiKey[]; act: Act }) {
  const [created, setCreated] = useState<string | null>(null);
  const create = (ev: Event) => {
    ev.preventDefault();
    const form = ev.currentTarget as HTMLFormElement;
    const f = new FormData(form);
    const limits = Object.fromEntries(
      (["rpm", "tpm", "max_concurrency"] as const).flatMap((k) => {
        const v = optionalInt(f, k);
        return v === undefined ? [] : [[k, v]];
      }),
    );
    const body = {
      name: text(f, "name"),
      role: text(f, "role"),
      ...(Object.keys(limits).length > 0 ? { limits } : {}),
    };
    void props.act(`create key ${body.name}`, async () => {
      const res = await api<{ key: string }>("POST", "/admin/v1/keys", body);
      setCreated(res.key);
      form.reset();
    });
  };
  const limitsText = (k: ApiKey) => {
    const l = k.limits;
    if (!l) return "none";
    const own = (["rpm", "tpm", "max_concurrency"] as const).flatMap((f) =>
      l[f] === undefined ? [] : [`${f}=${l[f]}`],
    );
    const models = Object.entries(l.models ?? {}).map(
      ([m, s]) =>
        `${m}: ${Object.entries(s)
          .map(([f, v]) => `${f}=${v}`)
          .join(",")}`,
    );
    return [...own, ...models].join("; ") || "none";
  };
  return (
    <section>
      <h2>API keys</h2>
      <form class="row" onSubmit={create} data-testid="key-form">
        <label>
          name <input name="name" required maxLength={100} />
        </label>
        <label>
          role{" "}
          <select name="role">
            <option value="user">user</option>
            <option value="admin">admin</option>
          </select>
        </label>
        <label>
          rpm <input name="rpm" type="number" min="1" />
        </label>
        <label>
          tpm <input name="tpm" type="number" min="1" />
        </label>
        <label>
          max concurrency <input name="max_concurrency" type="number" min="1" />
        </label>
        <button type="submit">Create key</button>
      </form>
      {created && (
        <p class="notice" data-testid="created-key">
          New key (shown once, copy it now): <code>{created}</code>{" "}
          <button type="button" class="link" onClick={() => setCreated(null)}>
            hide
          </button>
        </p>
      )}
      <table data-testid="keys">
        <thead>
          <tr>
            <th>name</th>
            <th>id</th>
            <th>role</th>
            <th>prefix</th>
            <th>limits</th>
            <th>created</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {props.keys.map((k) => (
            <tr data-testid={`key-${k.name}`}>
              <td>{k.name}</td>
              <td class="mono">{k.id}</td>
              <td>{k.role}</td>
              <td class="mono">{k.prefix}…</td>
              <td>{limitsText(k)}</td>
              {/* Key records keep seconds since the epoch (OpenAI's `created`), not milliseconds. */}
              <td>{new Date(k.created * 1000).toLocaleString()}</td>
              <td>
                <button
                  type="button"
                  class="danger"
                  onClick={() => {
                    if (confirm(`Revoke key "${k.name}" (${k.id})? Clients using it get 401 within seconds.`))
                      void props.act(`revoke key ${k.name}`, () =>
                        api("DELETE", `/admin/v1/keys/${encodeURIComponent(k.id)}`),
                      );
                  }}
                >
                  Revoke
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

/** CLI sessions (`platform auth login`): every organization's for an operator, each revocable. */
function Tokens(props: { tokens: CliToken[]; act: Act }) {
  const when = (ms: number) => new Date(ms).toLocaleString();
  return (
    <section>
      <h2>CLI tokens</h2>
      {props.tokens.length === 0 && <p class="hint">No CLI session: platform auth login starts one.</p>}
      <table data-testid="tokens">
        <thead>
          <tr>
            <th>name</th>
            <th>id</th>
            <th>subject</th>
            <th>organization</th>
            <th>role</th>
            <th>expires</th>
            <th>session ends</th>
            <th />
          </tr>
        </thead>
        <tbody>
          {props.tokens.map((t) => (
            <tr data-testid={`token-${t.id}`}>
              <td>{t.name}</td>
              <td class="mono">{t.id}</td>
              <td class="mono">
                {t.subject.kind} {t.subject.id}
              </td>
              <td>{t.org}</td>
              <td>{t.role}</td>
              <td>{when(t.expires)}</td>
              <td>{when(t.refresh_expires)}</td>
              <td>
                <button
                  type="button"
                  class="danger"
                  onClick={() => {
                    if (confirm(`Revoke the CLI token ${t.id} of ${t.name}? It stops working within seconds.`))
                      void props.act(`revoke token ${t.id}`, () =>
                        api("DELETE", `/admin/v1/tokens/${encodeURIComponent(t.id)}`),
                      );
                  }}
                >
                  Revoke
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

const root = document.getElementById("app");
if (root) {
  root.textContent = "";
  render(<App />, root);
}
