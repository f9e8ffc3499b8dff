/**
 * The operator's dashboard (docs/dashboard.md): endpoints, A/B tests, live traffic charts, models with
 * their evaluation results, batch jobs, scaling decisions, API keys, CLI tokens, deployed services
 * and proto packages, and the actions to change them. It holds no state on the server: it polls the
 * management API and /metrics every 2 s with the admin key the user gave, and every action is one
 * call to the same API the CLI uses. Each panel is a file of its own.
 */
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
  type ModelVersion,
  api,
  scrapeMetrics,
} from "./api.ts";
import { HISTORY } from "./chart.tsx";
import { type Point, type Scrape, parseMetrics, pointBetween, sumFor } from "./metrics.ts";
import { Protos } from "./protos.tsx";
import { Services } from "./services.tsx";

import { Keys, Tokens } from "./access.tsx";
import { Batches, Models } from "./catalog.tsx";
import { Deploy, EndpointCard } from "./endpoints.tsx";

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

export function Dashboard(props: { onLogout: (why: string | null) => void }) {
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
