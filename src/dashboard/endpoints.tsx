/** The endpoints panel: one card per endpoint (replicas, traffic, A/B test, scaling, its actions), and the deploy form. */
import { useState } from "preact/hooks";
import { type AbTest, type Autoscaling, type EndpointStatus, type ModelVersion, api } from "./api.ts";
import { Chart, format, HISTORY, LatencyChart } from "./chart.tsx";
import type { Point } from "./metrics.ts";

import { type Act, formOf, text } from "./forms.ts";
import { evaluationText } from "./catalog.tsx";
import { isImageEndpoint, Playground } from "./playground.tsx";

export function EndpointCard(props: {
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
      {props.scaling?.error && <p class="error">{props.scaling.error}</p>}
      {isImageEndpoint(e) && <Playground endpoint={e.endpoint} />}
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

export function Deploy(props: { models: ModelVersion[]; endpoints: EndpointStatus[]; act: Act }) {
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
