/**
 * The dashboard's services (docs/services.md, the dev center): a catalog of the organization's
 * deployed services, and a service's page: its overview (Markdown rendered by markdown.ts, never as
 * HTML), releases, rollouts, replicas, a live log tail, request rate, errors and latency from the
 * gateway's /metrics, its secrets by name and its environment, and forms to roll out a tag, restart
 * and undo. Everything is read from `/admin/v1/services` with the admin key, polled every 2 s; the
 * open service is kept in the URL's hash (`#service=<name>`), so a page can be linked to.
 */
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, api, scrapeMetrics, session } from "./api.ts";
import { Chart, format, HISTORY, LatencyChart } from "./chart.tsx";
import { Markdown } from "./markdown-view.tsx";
import { parseMetrics, type Scrape } from "./metrics.ts";
import { type ServicePoint, servicePointBetween } from "./service-metrics.ts";
import { Table } from "./table.tsx";

const POLL_MS = 2_000;
/** Log lines the page shows (the newest). */
const LOG_TAIL = 100;

// The API's shapes, as far as these pages read them (src/services/record.ts, docs/services.md).
type Who = { id: string; name: string };
type Release = { tag: string; digest: string; revision: string; protos: { package: string; version: string }[] };
type Rollout = {
  id: number;
  release: Release;
  from_tag: string | null;
  cause: string;
  phase: "progressing" | "complete" | "failed";
  reason?: string;
  started: number;
  finished?: number;
  by: Who;
};
type Replica = { id: string; tag: string; digest: string; state: string; ready?: boolean; restarts: number };
type Var = { name: string; value?: string; version: number; updated: number; by: Who | string };
type Service = {
  org: string;
  name: string;
  repo_type: string;
  image_repository: string;
  port: number;
  /** The desired count (the record's), or the replica list where the API puts it there. */
  replicas: number | Replica[];
  desired_replicas?: number;
  rpc_services: string[];
  owner: Who;
  overview?: string;
  current: Release | null;
  previous: Release | null;
  rollout: Rollout;
  rollouts?: Rollout[];
  env?: Var[];
  secrets?: Var[];
  url?: string;
};
type Status = {
  phase: Rollout["phase"];
  reason?: string;
  rollout: Rollout;
  current: Release | null;
  replicas: Replica[];
};
type LogLine = { at: number; replica: string; tag: string; text: string };

const path = (name: string, rest = "") => `/admin/v1/services/${encodeURIComponent(name)}${rest}`;
const short = (digest: string) => digest.slice(7, 19);
const release = (r: Release | null) => (r ? `${r.tag} (${short(r.digest)})` : "–");
const when = (ms: number) => new Date(ms).toLocaleString();
const who = (by: Var["by"]) => (typeof by === "string" ? by : by.name);

function counts(s: Service): { ready: number; desired: number } {
  if (typeof s.replicas === "number") return { ready: 0, desired: s.replicas };
  return {
    ready: s.replicas.filter((r) => r.state === "ready").length,
    desired: s.desired_replicas ?? s.replicas.length,
  };
}

/** `<gateway>/rpc/<package.Service>`: the gateway is the service's `url`, else this page's origin. */
function gatewayUrls(s: Service): string[] {
  const base = (s.url ?? location.origin).replace(/\/+$/, "").replace(/\/rpc$/, "");
  return s.rpc_services.map((rpc) => `${base}/rpc/${rpc}`);
}

const openFromHash = () => {
  const m = /^#service=([^&]+)/.exec(location.hash);
  return m ? decodeURIComponent(m[1] as string) : null;
};

export function Services() {
  const [services, setServices] = useState<Service[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [open, setOpen] = useState<string | null>(openFromHash);
  useEffect(() => {
    const load = () =>
      api<{ data: Service[] }>("GET", "/admin/v1/services").then(
        (r) => {
          setServices(r.data);
          setError(null);
        },
        (e: Error) => setError(e.message),
      );
    void load();
    const timer = setInterval(() => void load(), POLL_MS);
    const onHash = () => setOpen(openFromHash());
    addEventListener("hashchange", onHash);
    return () => {
      clearInterval(timer);
      removeEventListener("hashchange", onHash);
    };
  }, []);
  const show = (name: string | null) => {
    location.hash = name ? `service=${encodeURIComponent(name)}` : "";
    setOpen(name);
  };
  return (
    <section data-testid="services">
      <h2>Services</h2>
      {error && <p class="error">Could not list services: {error}</p>}
      {services?.length === 0 && (
        <p class="hint">No service deployed: platform dev-center service deploy &lt;name&gt; --tag &lt;tag&gt;</p>
      )}
      {services && services.length > 0 && <Catalog services={services} open={open} onOpen={show} />}
      {open && <ServicePage key={open} name={open} onClose={() => show(null)} />}
    </section>
  );
}

function Catalog(props: { services: Service[]; open: string | null; onOpen: (name: string) => void }) {
  return (
    <table data-testid="service-catalog">
      <thead>
        <tr>
          <th>service</th>
          <th>owner</th>
          <th>type</th>
          <th>image repository</th>
          <th>current</th>
          <th>previous</th>
          <th>protos</th>
          <th>gateway URL</th>
          <th>replicas</th>
          <th>rollout</th>
        </tr>
      </thead>
      <tbody>
        {props.services.map((s) => {
          const { ready, desired } = counts(s);
          return (
            <tr data-testid={`service-${s.name}`}>
              <td>
                <button
                  type="button"
                  class="link mono"
                  aria-pressed={props.open === s.name}
                  onClick={() => props.onOpen(s.name)}
                >
                  {s.name}
                </button>
              </td>
              <td>{s.owner.name}</td>
              <td>{s.repo_type}</td>
              <td class="mono">{s.image_repository}</td>
              <td class="mono">{release(s.current)}</td>
              <td class="mono">{release(s.previous)}</td>
              <td class="mono">
                {(s.current ?? s.rollout.release).protos.map((p) => `${p.package}@${p.version}`).join(", ") || "–"}
              </td>
              <td class="mono">
                {gatewayUrls(s).map((u) => (
                  <div>{u}</div>
                ))}
              </td>
              <td>
                {ready}/{desired}
              </td>
              <td>
                <span class={`state ${s.rollout.phase}`}>{s.rollout.phase}</span>
              </td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}

type Page = { service: Service; status: Status | null; logs: LogLine[] };

function ServicePage(props: { name: string; onClose: () => void }) {
  const [page, setPage] = useState<Page | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const points = useRef<ServicePoint[]>([]);
  const lastScrape = useRef<Scrape | null>(null);

  const refresh = useCallback(async () => {
    try {
      const [service, status, logs, metrics] = await Promise.all([
        api<Service>("GET", path(props.name)),
        api<Status>("GET", path(props.name, "/status")).catch(() => null),
        readLogs(props.name).catch(() => []),
        scrapeMetrics().catch(() => null),
      ]);
      if (metrics !== null) {
        const scrape = parseMetrics(metrics, Date.now());
        if (lastScrape.current)
          points.current = [
            ...points.current,
            servicePointBetween(lastScrape.current, scrape, service.org, service.name),
          ].slice(-HISTORY);
        lastScrape.current = scrape;
      }
      setPage({ service, status, logs });
      setError(null);
    } catch (e) {
      setError((e as Error).message);
    }
  }, [props.name]);

  useEffect(() => {
    void refresh();
    const timer = setInterval(() => void refresh(), POLL_MS);
    return () => clearInterval(timer);
  }, [refresh]);

  const act = async (what: string, body: unknown) => {
    setNotice(null);
    setError(null);
    try {
      const r = await api<Rollout>("POST", path(props.name, "/rollouts"), body);
      setNotice(`${what}: rollout ${r.id} started (${r.release.tag})`);
    } catch (e) {
      setError(`${what}: ${(e as Error).message}`);
    }
    await refresh();
  };

  return (
    <article class="endpoint" data-testid="service-page">
      <h3>
        {props.name} {page && <span class={`state ${page.service.rollout.phase}`}>{page.service.rollout.phase}</span>}{" "}
        <button type="button" class="link" onClick={props.onClose}>
          close
        </button>
      </h3>
      {error && (
        <p class="error" role="alert" data-testid="service-error">
          {error}
        </p>
      )}
      {notice && (
        <p class="notice" data-testid="service-notice">
          {notice}
        </p>
      )}
      {!page ? <p class="hint">Loading {props.name}…</p> : <PageBody page={page} points={points.current} act={act} />}
    </article>
  );
}

function PageBody(props: { page: Page; points: ServicePoint[]; act: (what: string, body: unknown) => Promise<void> }) {
  const s = props.page.service;
  const status = props.page.status;
  const replicas = status?.replicas ?? (Array.isArray(s.replicas) ? s.replicas : []);
  const last = props.points.at(-1);
  const rollTag = (ev: Event) => {
    ev.preventDefault();
    const tag = String(new FormData(ev.currentTarget as HTMLFormElement).get("tag") ?? "").trim();
    if (tag) void props.act(`roll out ${tag}`, { tag });
  };
  return (
    <>
      <dl class="facts">
        <dt>owner</dt>
        <dd>{s.owner.name}</dd>
        <dt>type</dt>
        <dd>{s.repo_type}</dd>
        <dt>image</dt>
        <dd class="mono">{s.image_repository}</dd>
        <dt>current</dt>
        <dd class="mono" data-testid="service-current">
          {release(s.current)}
        </dd>
        <dt>previous</dt>
        <dd class="mono">{release(s.previous)}</dd>
        <dt>gateway</dt>
        <dd class="mono">
          {gatewayUrls(s).map((u) => (
            <div>{u}</div>
          ))}
        </dd>
        <dt>requests/s</dt>
        <dd data-testid="service-rps">{format(last?.requestsPerSecond ?? null)}</dd>
        <dt>errors/s</dt>
        <dd data-testid="service-errors">{format(last?.errorsPerSecond ?? null)}</dd>
      </dl>
      {status?.phase === "failed" && (
        <p class="error" data-testid="service-failure">
          Rollout {status.rollout.id} failed: {status.reason ?? status.rollout.reason ?? "no reason given"}
        </p>
      )}
      <div class="charts">
        <Chart
          testId="service-chart-rps"
          title="requests/s"
          unit=""
          slots={HISTORY}
          series={[
            { label: "all", className: "a", values: props.points.map((p) => p.requestsPerSecond) },
            { label: "errors", className: "b", values: props.points.map((p) => p.errorsPerSecond) },
          ]}
        />
        <LatencyChart testId="service-chart-latency" points={props.points} />
      </div>
      <div class="actions">
        <form onSubmit={rollTag} data-testid="service-rollout-form">
          <label>
            tag{" "}
            <input
              name="tag"
              required
              placeholder={s.current?.tag ?? "1.0.0-abc1234"}
              pattern="[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}"
            />
          </label>
          <button type="submit">Roll out</button>
        </form>
        <button
          type="button"
          data-testid="service-restart"
          onClick={() => void props.act("restart", { restart: true })}
        >
          Restart
        </button>
        {s.previous && (
          <button
            type="button"
            class="danger"
            data-testid="service-undo"
            onClick={() => {
              if (confirm(`Roll ${s.name} back to ${s.previous?.tag}?`)) void props.act("undo", { undo: true });
            }}
          >
            Undo to {s.previous.tag}
          </button>
        )}
      </div>
      <h4>Replicas</h4>
      <Table testId="service-replicas" head={["replica", "tag", "digest", "state", "restarts"]}>
        {replicas.map((r) => (
          <tr>
            <td class="mono">{r.id}</td>
            <td class="mono">{r.tag}</td>
            <td class="mono">{short(r.digest)}</td>
            <td>{r.state}</td>
            <td>{r.restarts}</td>
          </tr>
        ))}
      </Table>
      <h4>Rollouts</h4>
      <Table testId="service-rollouts" head={["id", "tag", "cause", "phase", "started", "by", "reason"]}>
        {(s.rollouts ?? [s.rollout]).map((r) => (
          <tr>
            <td>{r.id}</td>
            <td class="mono">{r.release.tag}</td>
            <td>{r.cause}</td>
            <td>
              <span class={`state ${r.phase}`}>{r.phase}</span>
            </td>
            <td>{when(r.started)}</td>
            <td>{r.by.name}</td>
            <td>{r.reason ?? ""}</td>
          </tr>
        ))}
      </Table>
      <h4>Logs (last {LOG_TAIL} lines)</h4>
      <pre class="logs" data-testid="service-logs">
        {props.page.logs.map((l) => `[${l.replica} ${l.tag}] ${l.text.replace(/\n$/, "")}\n`).join("")}
      </pre>
      <h4>Secrets</h4>
      <Table testId="service-secrets" head={["name", "version", "updated", "by"]}>
        {(s.secrets ?? []).map((v) => (
          <tr>
            <td class="mono">{v.name}</td>
            <td>{v.version}</td>
            <td>{when(v.updated)}</td>
            <td>{who(v.by)}</td>
          </tr>
        ))}
      </Table>
      <h4>Environment</h4>
      <Table testId="service-env" head={["name", "value", "version", "updated", "by"]}>
        {(s.env ?? []).map((v) => (
          <tr>
            <td class="mono">{v.name}</td>
            <td class="mono">{v.value ?? ""}</td>
            <td>{v.version}</td>
            <td>{when(v.updated)}</td>
            <td>{who(v.by)}</td>
          </tr>
        ))}
      </Table>
      <h4>Overview</h4>
      <div class="overview" data-testid="service-overview">
        {s.overview ? (
          <Markdown text={s.overview} />
        ) : (
          <p class="hint">No overview: platform dev-center service overview set {s.name} --file README.md</p>
        )}
      </div>
    </>
  );
}

/** The logs route's NDJSON (not JSON, so not through `api`), the newest LOG_TAIL lines. */
async function readLogs(name: string): Promise<LogLine[]> {
  const key = session.get();
  const res = await fetch(path(name, `/logs?tail=${LOG_TAIL}`), {
    headers: key ? { authorization: `Bearer ${key}` } : {},
  });
  if (!res.ok) throw new ApiError(res.status, String(res.status), `GET logs answered ${res.status}`);
  const lines: LogLine[] = [];
  for (const text of (await res.text()).split("\n")) {
    if (text.trim() === "") continue;
    try {
      lines.push(JSON.parse(text) as LogLine);
    } catch {
      // A line that is not JSON is skipped: the tail is a view, not the record.
    }
  }
  return lines.slice(-LOG_TAIL);
}
