/**
 * The dashboard's proto catalog section (docs/protos.md): the signed-in organization's packages,
 * a package's versions, and a version's services (with their RPCs) and messages (with their
 * fields), as `GET /admin/v1/protos...` gives them. Versions never change, so a version's details
 * are read once; the package list is polled like the rest of the page.
 */
import { useEffect, useState } from "preact/hooks";
import { api } from "./api.ts";

// The API's shapes, as far as this section reads them (src/protos/record.ts, descriptors.ts).
type ProtoPackage = { package: string; latest: string; versions: number; updated: number };
type ProtoVersion = {
  version: string;
  created: number;
  published_by: { name: string };
  allow_breaking: boolean;
  files: { path: string }[];
  service_names: string[];
};
type Rpc = { name: string; input: string; output: string; client_streaming: boolean; server_streaming: boolean };
type ProtoVersionDetail = ProtoVersion & {
  services: { name: string; full_name: string; comment?: string; rpcs: (Rpc & { comment?: string })[] }[];
  messages: {
    name: string;
    full_name: string;
    comment?: string;
    fields: { name: string; number: number; type: string }[];
  }[];
  enums: { name: string; values: { name: string; number: number }[] }[];
};

const POLL_MS = 5_000;
const path = (pkg: string) => `/admin/v1/protos/${encodeURIComponent(pkg)}/versions`;
/** Records keep seconds since the epoch. */
const when = (seconds: number) => new Date(seconds * 1000).toLocaleString();
/** Type names as the package's own .proto writes them: its own types without the package. */
const local = (pkg: string, type: string) => type.replaceAll(`${pkg}.`, "");

export function Protos() {
  const [packages, setPackages] = useState<ProtoPackage[] | null>(null);
  const [selected, setSelected] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    const load = () =>
      api<{ data: ProtoPackage[] }>("GET", "/admin/v1/protos").then(
        (r) => {
          setPackages(r.data);
          setError(null);
        },
        (e: Error) => setError(e.message),
      );
    void load();
    const timer = setInterval(() => void load(), POLL_MS);
    return () => clearInterval(timer);
  }, []);
  return (
    <section data-testid="protos">
      <h2>Proto packages</h2>
      {error && <p class="error">Could not list proto packages: {error}</p>}
      {packages?.length === 0 && (
        <p class="hint">No proto package yet: run platform proto publish in a workspace of this organization.</p>
      )}
      {packages && packages.length > 0 && (
        <table data-testid="proto-packages">
          <thead>
            <tr>
              <th>package</th>
              <th>latest</th>
              <th>versions</th>
              <th>updated</th>
            </tr>
          </thead>
          <tbody>
            {packages.map((p) => (
              <tr>
                <td>
                  <button
                    type="button"
                    class="link mono"
                    aria-pressed={selected === p.package}
                    data-testid={`proto-package-${p.package}`}
                    onClick={() => setSelected(p.package)}
                  >
                    {p.package}
                  </button>
                </td>
                <td>{p.latest}</td>
                <td>{p.versions}</td>
                <td>{when(p.updated)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {selected && <ProtoPackageView key={selected} pkg={selected} />}
    </section>
  );
}

function ProtoPackageView(props: { pkg: string }) {
  const [versions, setVersions] = useState<ProtoVersion[] | null>(null);
  const [version, setVersion] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<{ data: ProtoVersion[] }>("GET", path(props.pkg)).then(
      (r) => {
        setVersions(r.data);
        setVersion((v) => v ?? r.data[0]?.version ?? null);
      },
      (e: Error) => setError(e.message),
    );
  }, [props.pkg]);
  return (
    <div data-testid="proto-package">
      <h3 class="mono">{props.pkg}</h3>
      {error && <p class="error">{error}</p>}
      {versions && (
        <table data-testid="proto-versions">
          <thead>
            <tr>
              <th>version</th>
              <th>published</th>
              <th>by</th>
              <th>files</th>
              <th>services</th>
              <th>breaking</th>
            </tr>
          </thead>
          <tbody>
            {versions.map((v) => (
              <tr data-testid={`proto-version-${v.version}`}>
                <td>
                  <button
                    type="button"
                    class="link mono"
                    aria-pressed={version === v.version}
                    onClick={() => setVersion(v.version)}
                  >
                    {v.version}
                  </button>
                </td>
                <td>{when(v.created)}</td>
                <td>{v.published_by.name}</td>
                <td>{v.files.length}</td>
                <td class="mono">{v.service_names.map((s) => local(props.pkg, s)).join(", ") || "–"}</td>
                <td>{v.allow_breaking ? "allowed" : "–"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {version && <ProtoVersionView key={version} pkg={props.pkg} version={version} />}
    </div>
  );
}

function ProtoVersionView(props: { pkg: string; version: string }) {
  const [detail, setDetail] = useState<ProtoVersionDetail | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<ProtoVersionDetail>("GET", `${path(props.pkg)}/${encodeURIComponent(props.version)}`).then(
      setDetail,
      (e: Error) => setError(e.message),
    );
  }, [props.pkg, props.version]);
  if (error) return <p class="error">{error}</p>;
  if (!detail) return <p class="hint">Loading {props.version}…</p>;
  const type = (name: string) => local(props.pkg, name);
  return (
    <div data-testid="proto-version">
      <h4>
        {props.pkg}@{detail.version}: services
      </h4>
      {detail.services.length === 0 && <p class="hint">No service.</p>}
      <ul data-testid="proto-services">
        {detail.services.map((s) => (
          <li>
            <b class="mono">{s.name}</b> {s.comment && <span class="hint">{s.comment}</span>}
            <ul>
              {s.rpcs.map((r) => (
                <li class="mono" title={r.comment}>
                  {r.name}({r.client_streaming ? "stream " : ""}
                  {type(r.input)}) → {r.server_streaming ? "stream " : ""}
                  {type(r.output)}
                </li>
              ))}
            </ul>
          </li>
        ))}
      </ul>
      <h4>Messages</h4>
      <ul data-testid="proto-messages">
        {detail.messages.map((m) => (
          <li>
            <b class="mono">{m.name}</b> {m.comment && <span class="hint">{m.comment}</span>}
            <span class="mono">
              {" { "}
              {m.fields.map((f) => `${type(f.type)} ${f.name} = ${f.number};`).join(" ")}
              {" }"}
            </span>
          </li>
        ))}
      </ul>
      {detail.enums.length > 0 && (
        <>
          <h4>Enums</h4>
          <ul data-testid="proto-enums">
            {detail.enums.map((e) => (
              <li class="mono">
                {e.name} {"{ "}
                {e.values.map((v) => `${v.name} = ${v.number};`).join(" ")}
                {" }"}
              </li>
            ))}
          </ul>
        </>
      )}
    </div>
  );
}
