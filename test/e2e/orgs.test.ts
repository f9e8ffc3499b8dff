/**
 * Organizations as a boundary, attacked through the shared `platform up` (docs/security.md,
 * "Organizations"; the organizations, keys and model here have names of this file's own): a
 * second organization's admin and user keys try to list, read, change and revoke the first's keys,
 * batch jobs, files, storage, usage and tokens, and to manage what the install shares (models,
 * endpoints): each is a 404 (another organization's resource) or a 403 (an operator's action), and
 * lists hold nothing of the other. Then CLI tokens through the real CLI:
 * refreshed before a request, a spent refresh token ending the session, `session expired` with
 * exit 1; the old credentials form migrated; the workspace's registry.
 */
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { issueToken } from "../../src/tokens/store.ts";
import { recordUsage } from "../../src/usage/counters.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import { type CliResult, runCli, type Stack } from "../helpers/stack.ts";

type Key = { id: string; key: string; org: string; role: string };
type Reply<T = Record<string, unknown>> = { status: number; body: T };

const ACME = unique("acme");
const RIVAL = unique("rival");
const MODEL = unique("tiny");
const EVIL = unique("evil");
const NOWHERE = unique("nowhere");

const LIFETIMES = { ttlMs: 3_600_000, refreshTtlMs: 86_400_000 };

let stack: Stack;
let ctl: Control;
let work: string;
let operatorId: string;
const keys = {} as Record<"acmeAdmin" | "acmeUser" | "acmeUser2" | "rivalAdmin" | "rivalUser", Key>;

async function call<T = Record<string, unknown>>(
  key: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<Reply<T>> {
  const res = await fetch(`${stack.baseUrl}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: (text ? JSON.parse(text) : {}) as T };
}

const codeOf = (r: Reply) => (r.body as { error?: { code?: string } }).error?.code;

function cliJson<T>(r: CliResult): T {
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as T;
}

beforeAll(async () => {
  stack = await sharedStack();
  ctl = connectControl(stack.redisUrl, "platform");
  work = await mkdtemp(join(tmpdir(), "platform-orgs-"));
  operatorId = (await call<{ id: string }>(stack.apiKey, "GET", "/admin/v1/whoami")).body.id;
  const created = cliJson<{ id: string; name: string }>(
    await runCli(["orgs", "create", ACME, "--name", "Acme Corp", "--json"], stack.env),
  );
  expect(created).toMatchObject({ id: ACME, name: "Acme Corp" });
  cliJson(await runCli(["orgs", "create", RIVAL, "--json"], stack.env));
  keys.acmeAdmin = cliJson(
    await runCli(["keys", "create", `${ACME}-admin`, "--org", ACME, "--role", "admin", "--json"], stack.env),
  );
  keys.rivalAdmin = cliJson(
    await runCli(["keys", "create", `${RIVAL}-admin`, "--org", RIVAL, "--role", "admin", "--json"], stack.env),
  );
  // An organization's admin makes its own organization's keys, with no --org.
  const asAcmeAdmin = { ...stack.env, PLATFORM_API_KEY: keys.acmeAdmin.key };
  keys.acmeUser = cliJson(await runCli(["keys", "create", `${ACME}-user`, "--json"], asAcmeAdmin));
  keys.acmeUser2 = (await call<Key>(keys.acmeAdmin.key, "POST", "/admin/v1/keys", { name: `${ACME}-user-2` })).body;
  keys.rivalUser = (await call<Key>(keys.rivalAdmin.key, "POST", "/admin/v1/keys", { name: `${RIVAL}-user` })).body;
});

afterAll(async () => {
  await ctl?.redis.quit();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("organizations", () => {
  it("an operator creates organizations and keys in any of them; an organization's admin only its own keys", async () => {
    expect(keys.acmeAdmin).toMatchObject({ org: ACME, role: "admin" });
    expect(keys.acmeUser).toMatchObject({ org: ACME, role: "user" });
    expect(keys.rivalUser).toMatchObject({ org: RIVAL, role: "user" });
    // `platform up`'s key is an operator: an admin of the install's own organization.
    expect((await call(stack.apiKey, "GET", "/admin/v1/whoami")).body).toMatchObject({
      kind: "key",
      org: "default",
      role: "admin",
      operator: true,
    });
    const asAcmeAdmin = { ...stack.env, PLATFORM_API_KEY: keys.acmeAdmin.key };
    const orgCreate = await runCli(["orgs", "create", "mine"], asAcmeAdmin);
    expect(orgCreate.code).toBe(1);
    expect(orgCreate.stderr).toMatch(/needs an operator.*\(permission_denied\)/);
    const elsewhere = await runCli(["keys", "create", "spy", "--org", RIVAL, "--role", "admin"], asAcmeAdmin);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stderr).toMatch(/permission_denied/);
    expect((await runCli(["keys", "create", "x", "--org", "Not_A_Label"], stack.env)).code).toBe(2);
    expect((await runCli(["orgs", "create", "-bad-"], stack.env)).code).toBe(2);
    const again = await runCli(["orgs", "create", ACME], stack.env);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already exists.*\(org_exists\)/);
    const nowhere = await call(stack.apiKey, "POST", "/admin/v1/keys", { name: "x", org: NOWHERE });
    expect([nowhere.status, codeOf(nowhere)]).toEqual([404, "org_not_found"]);
    // Lists: the operator sees every organization, anyone else its own; another's is a 404.
    const all = cliJson<{ id: string }[]>(await runCli(["orgs", "list", "--json"], stack.env));
    // Other files' organizations are there too, on the shared stack: of the list, only these count.
    const mine = ["default", ACME, RIVAL];
    expect(all.map((o) => o.id).filter((id) => mine.includes(id))).toEqual(mine);
    const own = cliJson<{ id: string }[]>(await runCli(["orgs", "list", "--json"], asAcmeAdmin));
    expect(own.map((o) => o.id)).toEqual([ACME]);
    for (const who of [keys.rivalAdmin, keys.rivalUser]) {
      const r = await call(who.key, "GET", `/admin/v1/orgs/${ACME}`);
      expect([r.status, codeOf(r)]).toEqual([404, "org_not_found"]);
    }
    expect((await call(keys.acmeUser.key, "GET", `/admin/v1/orgs/${ACME}`)).status).toBe(200);
  });

  it("another organization can neither list, read, update nor revoke a key (404), and its users reach no key route (403)", async () => {
    const listed = (await call<{ data: Key[] }>(keys.rivalAdmin.key, "GET", `/admin/v1/keys?org=${ACME}`)).body.data;
    expect(listed.map((k) => k.id).sort()).toEqual([keys.rivalAdmin.id, keys.rivalUser.id].sort());
    for (const target of [keys.acmeAdmin, keys.acmeUser, { id: operatorId }]) {
      const path = `/admin/v1/keys/${target.id}`;
      for (const [method, body] of [
        ["GET", undefined],
        ["PATCH", { limits: { rpm: 1 } }],
        ["DELETE", undefined],
      ] as const) {
        const r = await call(keys.rivalAdmin.key, method, path, body);
        expect([r.status, codeOf(r)], `${method} ${path}`).toEqual([404, "key_not_found"]);
        expect((await call(keys.rivalUser.key, method, path, body)).status).toBe(403);
      }
    }
    // The install's own keys are as invisible to an organization's admin as another organization's.
    expect((await call(keys.acmeAdmin.key, "GET", `/admin/v1/keys/${operatorId}`)).status).toBe(404);
    // Nothing changed: acme's keys work and its admin manages them; the operator sees them by organization.
    expect((await call(keys.acmeUser.key, "GET", "/v1/models")).status).toBe(200);
    const patched = await call(keys.acmeAdmin.key, "PATCH", `/admin/v1/keys/${keys.acmeUser.id}`, {
      limits: { rpm: 1000 },
    });
    expect(patched.body).toMatchObject({ id: keys.acmeUser.id, limits: { rpm: 1000 } });
    const acme = (await call<{ data: Key[] }>(stack.apiKey, "GET", `/admin/v1/keys?org=${ACME}`)).body.data;
    expect(acme.map((k) => k.id).sort()).toEqual([keys.acmeAdmin.id, keys.acmeUser.id, keys.acmeUser2.id].sort());
  });

  it("what the install shares needs an operator: no organization's admin registers models or deploys endpoints", async () => {
    const attempts: [string, string, unknown?][] = [
      ["POST", "/admin/v1/models", { name: EVIL, source: "https://example.com/x.gguf" }],
      ["POST", `/admin/v1/models/${EVIL}/upload?source=x.gguf`, undefined],
      ["GET", "/admin/v1/models"],
      ["PUT", `/admin/v1/endpoints/${EVIL}`, { model: { name: EVIL } }],
      ["GET", "/admin/v1/endpoints"],
      ["DELETE", `/admin/v1/endpoints/${EVIL}`],
      ["PUT", `/admin/v1/endpoints/${EVIL}/autoscaling`, { autoscaling: { enabled: true } }],
      ["PUT", `/admin/v1/endpoints/${EVIL}/abtest`, { split: "v1=50,v2=50" }],
      ["GET", "/admin/v1/scrape-targets"],
    ];
    for (const who of [keys.acmeAdmin, keys.rivalAdmin, keys.rivalUser]) {
      for (const [method, path, body] of attempts) {
        const r = await call(who.key, method, path, body);
        expect([r.status, codeOf(r)], `${who.org} ${who.role}: ${method} ${path}`).toEqual([403, "permission_denied"]);
      }
      // Inference routes stay open to every organization.
      expect((await call(who.key, "GET", "/v1/models")).status).toBe(200);
    }
    // Other files' models are there too, on the shared stack: none of them is the one attempted here.
    const models = (await call<{ data: { name: string }[] }>(stack.apiKey, "GET", "/admin/v1/models")).body.data;
    expect(models.filter((m) => m.name === EVIL)).toEqual([]);
  });

  it("batch jobs and files: the owner and its organization's admin see them, another user or organization nothing", async () => {
    const form = new FormData();
    form.set("purpose", "batch");
    form.set("file", new Blob(['{"custom_id":"a","prompt":"hi"}\n']), "in.jsonl");
    const uploaded = await fetch(`${stack.baseUrl}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${keys.acmeUser.key}` },
      body: form,
    });
    const file = ((await uploaded.json()) as { id: string }).id;
    const job = await call<{ id: string; org: string }>(keys.acmeUser.key, "POST", "/v1/batch-jobs", {
      model: MODEL,
      version: "v1",
      input_file_id: file,
    });
    expect(job.status).toBe(201);
    expect(job.body.org).toBe(ACME);
    const id = job.body.id;
    for (const who of [keys.rivalAdmin, keys.rivalUser, keys.acmeUser2]) {
      for (const [method, path] of [
        ["GET", `/v1/batch-jobs/${id}`],
        ["POST", `/v1/batch-jobs/${id}/cancel`],
        ["POST", `/v1/batch-jobs/${id}/resume`],
        ["GET", `/v1/batch-jobs/${id}/output`],
      ]) {
        const r = await call(who.key, method as string, path as string);
        expect([r.status, codeOf(r)], `${who.id}: ${method} ${path}`).toEqual([404, "batch_not_found"]);
      }
      for (const [method, path] of [
        ["GET", `/v1/files/${file}`],
        ["GET", `/v1/files/${file}/content`],
        ["DELETE", `/v1/files/${file}`],
      ]) {
        const r = await call(who.key, method as string, path as string);
        expect([r.status, codeOf(r)], `${who.id}: ${method} ${path}`).toEqual([404, "file_not_found"]);
      }
      // Using it as an input is as unknown.
      const reuse = await call(who.key, "POST", "/v1/batch-jobs", {
        model: MODEL,
        version: "v1",
        input_file_id: file,
      });
      expect(reuse.status).toBe(404);
      const jobs = (await call<{ data: { id: string }[] }>(who.key, "GET", "/v1/batch-jobs?limit=100")).body.data;
      expect(jobs.map((j) => j.id)).not.toContain(id);
      const files = (await call<{ data: { id: string }[] }>(who.key, "GET", "/v1/files")).body.data;
      expect(files.map((f) => f.id)).not.toContain(file);
    }
    for (const who of [keys.acmeUser, keys.acmeAdmin, { key: stack.apiKey }]) {
      expect((await call(who.key, "GET", `/v1/batch-jobs/${id}`)).status).toBe(200);
      expect((await call(who.key, "GET", `/v1/files/${file}`)).status).toBe(200);
      const jobs = (await call<{ data: { id: string }[] }>(who.key, "GET", "/v1/batch-jobs?limit=100")).body.data;
      expect(jobs.map((j) => j.id)).toContain(id);
    }
  });

  it("storage: each organization's keys reach its own area, never another's", async () => {
    const root = join(stack.dataDir, "batch");
    const area = (org: string, id?: string) => join(root, "orgs", org, ...(id ? [id] : []));
    const storage = async (key: string) =>
      (await call<{ roots: string[]; relative_to: string }>(key, "GET", "/v1/storage")).body;
    expect((await storage(keys.acmeUser.key)).relative_to).toBe(`file://${area(ACME, keys.acmeUser.id)}/`);
    expect((await storage(keys.rivalAdmin.key)).relative_to).toBe(`file://${area(RIVAL)}/`);
    expect((await storage(stack.apiKey)).relative_to).toBe(`file://${root}/`);
    await mkdir(area(ACME, keys.acmeUser.id), { recursive: true });
    const input = join(area(ACME, keys.acmeUser.id), "in.jsonl");
    await writeFile(input, '{"prompt":"hi"}\n');
    const own = await call(keys.acmeUser.key, "POST", "/v1/batch-jobs", {
      model: MODEL,
      version: "v1",
      input: "in.jsonl",
      output: "out/",
    });
    expect(own.status, JSON.stringify(own.body)).toBe(201);
    expect(
      (
        await call(keys.acmeAdmin.key, "POST", "/v1/batch-jobs", {
          model: MODEL,
          version: "v1",
          input,
          output: `${area(ACME)}/admin-out/`,
        })
      ).status,
    ).toBe(201);
    const attempts: [Key, Record<string, string>][] = [
      [keys.rivalAdmin, { input: `file://${input}`, output: "out/" }],
      [keys.rivalAdmin, { input: "in.jsonl", output: `${area(ACME, keys.acmeUser.id)}/stolen/` }],
      [keys.rivalUser, { input: `../../${ACME}/${keys.acmeUser.id}/in.jsonl`, output: "out/" }],
      [keys.rivalUser, { input, output: "out/" }],
      [keys.acmeUser2, { input, output: "out/" }],
      [keys.acmeAdmin, { input: join(root, "elsewhere.jsonl"), output: "out/" }],
    ];
    for (const [who, uris] of attempts) {
      const r = await call(who.key, "POST", "/v1/batch-jobs", { model: MODEL, version: "v1", ...uris });
      expect([r.status, codeOf(r)], `${who.id} ${JSON.stringify(uris)}`).toEqual([403, "storage_forbidden"]);
    }
  });

  it("usage: a user its own, an organization's admin its organization's, another organization's a 404", async () => {
    await recordUsage(ctl, { key: keys.acmeUser.id, model: MODEL, version: "v1", requests: 3 });
    await recordUsage(ctl, { key: keys.rivalUser.id, model: MODEL, version: "v1", requests: 5 });
    type Usage = { data: { key: string; requests: number }[] };
    const rows = async (key: string, query = "") =>
      (await call<Usage>(key, "GET", `/v1/usage?since=1h&by=key${query}`)).body.data;
    const rival = await rows(keys.rivalAdmin.key);
    expect(rival).toEqual(
      [{ key: keys.rivalUser.id, key_name: `${RIVAL}-user`, requests: 5 }].map((r) => expect.objectContaining(r)),
    );
    const acme = await rows(keys.acmeAdmin.key);
    expect(acme.map((r) => [r.key, r.requests])).toEqual([[keys.acmeUser.id, 3]]);
    const named = await call(keys.rivalAdmin.key, "GET", `/v1/usage?key=${keys.acmeUser.id}`);
    expect([named.status, codeOf(named)]).toEqual([404, "key_not_found"]);
    // A user naming any key but its own is refused alike, whoever's it is.
    expect((await call(keys.rivalUser.key, "GET", `/v1/usage?key=${keys.acmeUser.id}`)).status).toBe(403);
    expect((await rows(keys.rivalUser.key)).map((r) => r.key)).toEqual([keys.rivalUser.id]);
    const all = (await rows(stack.apiKey)).map((r) => r.key);
    expect(all).toEqual(expect.arrayContaining([keys.acmeUser.id, keys.rivalUser.id]));
  });

  it("tokens: who they are, listed and revoked within their organization, dead with their key", async () => {
    const grant = await issueToken(ctl, { kind: "key", id: keys.acmeUser.id }, LIFETIMES);
    const me = await call(grant.token, "GET", "/admin/v1/whoami");
    expect(me.body).toEqual({
      object: "caller",
      kind: "token",
      id: keys.acmeUser.id,
      name: `${ACME}-user`,
      org: ACME,
      role: "user",
      operator: false,
      limits: { rpm: 1000 },
      token: { id: grant.id, expires: grant.expires },
    });
    // A token acts as its key: it sees the key's own tokens, and another organization's admin does not.
    const mine = (await call<{ data: { id: string }[] }>(grant.token, "GET", "/admin/v1/tokens")).body.data;
    expect(mine.map((t) => t.id)).toEqual([grant.id]);
    for (const who of [keys.rivalAdmin, keys.rivalUser, keys.acmeUser2]) {
      const listed = (await call<{ data: { id: string }[] }>(who.key, "GET", `/admin/v1/tokens?org=${ACME}`)).body.data;
      expect(listed.map((t) => t.id)).not.toContain(grant.id);
      const r = await call(who.key, "DELETE", `/admin/v1/tokens/${grant.id}`);
      expect([r.status, codeOf(r)]).toEqual([404, "token_not_found"]);
    }
    expect((await call(grant.token, "GET", "/v1/models")).status).toBe(200);
    const listed = (await call<{ data: { id: string }[] }>(keys.acmeAdmin.key, "GET", "/admin/v1/tokens")).body.data;
    expect(listed.map((t) => t.id)).toContain(grant.id);
    expect((await call(keys.acmeAdmin.key, "DELETE", `/admin/v1/tokens/${grant.id}`)).status).toBe(200);
    // Gateways remember verified callers for up to 5 s, tokens as keys.
    await stack.waitFor(async () => (await call(grant.token, "GET", "/v1/models")).status === 401, "revoked", 15_000);
    const dead = await call<{ error: { message: string; code: string } }>(grant.token, "GET", "/v1/models");
    expect(dead.status).toBe(401);
    expect(dead.body.error).toMatchObject({
      code: "token_expired",
      message: `session expired for ${stack.baseUrl}: run platform auth login`,
    });
    const refresh = await fetch(`${stack.baseUrl}/admin/v1/tokens/refresh`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ refresh_token: grant.refresh_token }),
    });
    expect(refresh.status).toBe(401);
    // Bound to a key: revoking the key ends its tokens, within the gateway's 5 s cache.
    const other = await issueToken(ctl, { kind: "key", id: keys.acmeUser2.id }, LIFETIMES);
    expect((await call(other.token, "GET", "/v1/models")).status).toBe(200);
    expect((await call(keys.acmeAdmin.key, "DELETE", `/admin/v1/keys/${keys.acmeUser2.id}`)).status).toBe(200);
    await stack.waitFor(
      async () => (await call(other.token, "GET", "/v1/models")).status === 401,
      "the token to die",
      15_000,
    );
  });
});

describe("the CLI with tokens and credentials per registry", () => {
  const envFor = (config: string): NodeJS.ProcessEnv => ({
    ...stack.env,
    PLATFORM_BASE_URL: undefined,
    PLATFORM_API_KEY: undefined,
    PLATFORM_CONFIG_DIR: config,
  });

  it("refreshes an expired token before a request and saves the new pair; a spent refresh token ends the session", async () => {
    const config = join(work, "token-config");
    const grant = await issueToken(ctl, { kind: "key", id: keys.acmeAdmin.id }, LIFETIMES);
    await mkdir(config, { mode: 0o700 });
    const file = join(config, "credentials.json");
    const entry = {
      token: grant.token,
      refresh_token: grant.refresh_token,
      expires: new Date(Date.now() - 1000).toISOString(),
    };
    await writeFile(file, JSON.stringify({ registries: { [stack.baseUrl]: entry }, default: stack.baseUrl }), {
      mode: 0o600,
    });
    const listed = cliJson<Key[]>(await runCli(["keys", "list", "--json"], envFor(config)));
    expect(listed.every((k) => k.org === ACME)).toBe(true);
    const saved = JSON.parse(await readFile(file, "utf8")).registries[stack.baseUrl];
    expect(saved.token).toMatch(/^pt_/);
    expect(saved.token).not.toBe(grant.token);
    expect(saved.refresh_token).not.toBe(grant.refresh_token);
    expect(Date.parse(saved.expires)).toBeGreaterThan(Date.now());
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect((await stat(config)).mode & 0o777).toBe(0o700);
    // The same session keeps working without a refresh.
    expect((await runCli(["keys", "list", "--json"], envFor(config))).code).toBe(0);
    // A thief replays the refresh token the CLI already traded: the session ends, the CLI's copy with it.
    const replay = await fetch(`${stack.baseUrl}/admin/v1/tokens/refresh`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ refresh_token: grant.refresh_token }),
    });
    expect(replay.status).toBe(401);
    await stack.waitFor(
      async () => {
        const r = await runCli(["keys", "list"], envFor(config));
        return r.code === 1;
      },
      "the CLI to see its session end",
      15_000,
    );
    const ended = await runCli(["keys", "list"], envFor(config));
    expect(ended.code).toBe(1);
    expect(ended.stderr.trim()).toBe(`session expired for ${stack.baseUrl}: run platform auth login`);
    expect(ended.stdout).toBe("");
    // Forced to refresh (expired locally), it says the same: the refresh token is dead too.
    const expired = { ...JSON.parse(await readFile(file, "utf8")) };
    expired.registries[stack.baseUrl].expires = new Date(0).toISOString();
    await writeFile(file, JSON.stringify(expired));
    const refused = await runCli(["usage"], envFor(config));
    expect([refused.code, refused.stderr.trim()]).toEqual([
      1,
      `session expired for ${stack.baseUrl}: run platform auth login`,
    ]);
  });

  it("reads the old credentials form, and `auth login` rewrites it in the new one", async () => {
    const config = join(work, "legacy-config");
    await mkdir(config, { mode: 0o700 });
    const file = join(config, "credentials.json");
    await writeFile(file, JSON.stringify({ base_url: stack.baseUrl, api_key: keys.acmeAdmin.key }), { mode: 0o600 });
    const listed = cliJson<Key[]>(await runCli(["keys", "list", "--json"], envFor(config)));
    expect(listed.map((k) => k.org)).toContain(ACME);
    const login = await runCli(
      ["auth", "login", "--api-key", keys.rivalAdmin.key, "--base-url", `${stack.baseUrl}/`],
      envFor(config),
    );
    expect(login.code, login.stderr).toBe(0);
    expect(login.stdout).toContain(`logged in to ${stack.baseUrl} as ${RIVAL}-admin (admin of organization ${RIVAL})`);
    expect(JSON.parse(await readFile(file, "utf8"))).toEqual({
      registries: { [stack.baseUrl]: { api_key: keys.rivalAdmin.key } },
      default: stack.baseUrl,
    });
    const bad = await runCli(["auth", "login", "--api-key", "sk-plat-wrong"], envFor(config));
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/invalid_api_key/);
  });

  it("talks to the workspace's registry (.platformrc.json, found from a subdirectory) over the default", async () => {
    const config = join(work, "ws-config");
    const workspace = join(work, "team");
    await mkdir(join(workspace, "src", "deep"), { recursive: true });
    await writeFile(join(workspace, ".platformrc.json"), JSON.stringify({ registryUrl: stack.baseUrl, orgId: ACME }));
    await mkdir(config, { mode: 0o700 });
    await writeFile(
      join(config, "credentials.json"),
      JSON.stringify({
        registries: {
          "http://127.0.0.1:9": { api_key: "sk-plat-elsewhere" },
          [stack.baseUrl]: { api_key: keys.acmeAdmin.key },
        },
        default: "http://127.0.0.1:9",
      }),
      { mode: 0o600 },
    );
    const inside = await runCli(["orgs", "list", "--json"], envFor(config), join(workspace, "src", "deep"));
    expect(cliJson<{ id: string }[]>(inside).map((o) => o.id)).toEqual([ACME]);
    const outside = await runCli(["orgs", "list"], envFor(config), work);
    expect(outside.code).toBe(1);
    expect(outside.stderr).toMatch(/cannot reach the platform at http:\/\/127\.0\.0\.1:9/);
    await writeFile(join(workspace, ".platformrc.json"), JSON.stringify({ registryUrl: "not a url" }));
    const broken = await runCli(["orgs", "list"], envFor(config), workspace);
    expect(broken.code).toBe(2);
    expect(broken.stderr).toContain(`${join(workspace, ".platformrc.json")}: registryUrl: expected`);
  });
});
