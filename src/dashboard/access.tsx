/** Who may call the platform: the API keys panel and the CLI tokens panel, with their actions. */
import { useState } from "preact/hooks";
import { type ApiKey, type CliToken, api } from "./api.ts";

import { type Act, optionalInt, text } from "./forms.ts";

export function Keys(props: { keys: ApiKey[]; act: Act }) {
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
export function Tokens(props: { tokens: CliToken[]; act: Act }) {
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
