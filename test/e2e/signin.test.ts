/**
 * Signing the CLI in, end to end (docs/signin.md): a real `platform up`, the real CLI, Debian's
 * headless Chromium driven by playwright-core, and a real OpenID Connect provider (`oidc-provider`
 * on loopback, with its development login and consent pages) whose accounts carry organization and
 * role claims. `platform auth login` hands its URL to `$BROWSER` — here a script that writes it to
 * a file the test reads — and Chromium does what a person would: the API key form, the provider's
 * login, the consent page. The device flow runs from `--no-browser`. Then the attacks: a wrong
 * state, a missing or wrong PKCE verifier, a replayed code, a redirect URI off loopback, a forged
 * form, guessing, an expired and a revoked token, another organization's token: each refused, its
 * reason in the gateway's log, nothing in the answer to tell an attacker which. Skipped, saying
 * so, where /usr/bin/chromium is absent (`.ci/run` installs it).
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import Provider from "oidc-provider";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Control, connectControl } from "../../src/redis/connection.ts";
import { pkceChallenge, randomSecret } from "../../src/signin/oauth.ts";
import { issueToken } from "../../src/tokens/store.ts";
import { BIN, type CliResult, type OwnStack, runCli, startStack } from "../helpers/stack.ts";
import { api } from "../helpers/api.ts";

const CHROMIUM = "/usr/bin/chromium";
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium)
  console.warn(`sign-in test skipped: ${CHROMIUM} not found (apt-get install chromium; .ci/run installs it)`);

const OIDC_CLIENT = { id: "platform-gateway", secret: "a-client-secret-of-the-gateway-at-the-provider" };
/** The provider's people: claims as an operator's Keycloak or Okta would send them. */
const ACCOUNTS: Record<string, Record<string, string>> = {
  alice: { name: "Alice Example", email: "alice@example.com", org: "acme", role: "admin" },
  ghost: { name: "Gus Ghost", org: "ghost-corp", role: "user" },
  mallory: { name: "Mallory", org: "acme", role: "owner" },
};

let stack: OwnStack;
let ctl: Control;
let work: string;
let idp: Server;
let issuer: string;
let browser: Browser;
const keys = {} as Record<"acmeAdmin" | "rivalAdmin", { id: string; key: string }>;
/** The acme admin's CLI token from the browser sign-in, for the attacks on it later. */
let acmeToken: { id: string; token: string };

type Login = {
  child: ChildProcess;
  done: Promise<CliResult>;
  url: () => Promise<string>;
  /** What the CLI printed to stderr so far (where the device flow shows its URL and code). */
  stderr: () => string;
  config: string;
};

/** `platform auth login` as a person runs it, with BROWSER a script that hands the URL to this test. */
async function login(name: string, args: string[] = []): Promise<Login> {
  const dir = join(work, name);
  const config = join(dir, "config");
  await mkdir(config, { recursive: true, mode: 0o700 });
  const opened = join(dir, "opened-url");
  const script = join(dir, "browser.sh");
  await writeFile(script, `#!/bin/sh\nprintf '%s' "$1" > "${opened}"\n`);
  await chmod(script, 0o755);
  const child = spawn(process.execPath, [BIN, "auth", "login", "--registry-url", stack.baseUrl, ...args], {
    env: envFor(config, { BROWSER: script }),
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (d) => (stdout += d));
  child.stderr?.on("data", (d) => (stderr += d));
  const done = new Promise<CliResult>((resolve) => child.once("exit", (code) => resolve({ code, stdout, stderr })));
  const url = async () => {
    await stack.waitFor(
      async () => existsSync(opened) && (await readFile(opened, "utf8")).length > 0,
      "$BROWSER",
      20_000,
    );
    return readFile(opened, "utf8");
  };
  return { child, done, url, stderr: () => stderr, config };
}

function envFor(config: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    ...stack.env,
    PLATFORM_BASE_URL: undefined,
    PLATFORM_API_KEY: undefined,
    PLATFORM_CONFIG_DIR: config,
    ...extra,
  };
}

async function credentialsIn(config: string) {
  return JSON.parse(await readFile(join(config, "credentials.json"), "utf8")) as {
    registries: Record<string, { token?: string; refresh_token?: string; expires?: string; api_key?: string }>;
    default?: string;
  };
}

/** A fresh browser profile: no cookie of an earlier sign-in, at the gateway or the provider. */
async function freshPage(): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext();
  // The provider's development pages import a web font: nothing leaves the machine.
  await context.route(/^https:\/\//, (route) => route.abort());
  return { context, page: await context.newPage() };
}

const call = <T = Record<string, unknown>>(bearer: string, method: string, path: string) =>
  api(stack.baseUrl, bearer)<T>(method, path);

const form = (fields: Record<string, string>) => ({
  method: "POST",
  headers: { "content-type": "application/x-www-form-urlencoded" },
  body: new URLSearchParams(fields),
});

async function tokenRequest(fields: Record<string, string>) {
  const res = await fetch(`${stack.baseUrl}/auth/token`, form({ client_id: "platform-cli", ...fields }));
  return { status: res.status, body: (await res.json()) as Record<string, string> };
}

/**
 * The browser's side of a loopback sign-in over plain HTTP (cookie and CSRF secret carried by
 * hand), up to the redirect back to `redirect`: resolves that redirect's URL.
 */
async function authorizeOverHttp(key: string, query: Record<string, string>): Promise<URL> {
  const authorize = await fetch(`${stack.baseUrl}/auth/authorize?${new URLSearchParams(query)}`, {
    redirect: "manual",
  });
  expect(authorize.status).toBe(303);
  const cookie = (authorize.headers.get("set-cookie") ?? "").split(";")[0] as string;
  const page = await (await fetch(`${stack.baseUrl}/auth/signin`, { headers: { cookie } })).text();
  const csrf = (/name="csrf" value="([^"]+)"/.exec(page) ?? [])[1] as string;
  const post = (path: string, fields: Record<string, string>) =>
    fetch(`${stack.baseUrl}${path}`, {
      ...form({ csrf, ...fields }),
      headers: { ...form({}).headers, cookie },
      redirect: "manual",
    });
  expect((await post("/auth/signin", { api_key: key })).headers.get("location")).toBe("/auth/consent");
  const consent = await post("/auth/consent", { decision: "allow" });
  return new URL(consent.headers.get("location") as string);
}

function loopbackQuery(verifier: string, port = 40_001) {
  return {
    response_type: "code",
    client_id: "platform-cli",
    redirect_uri: `http://127.0.0.1:${port}/callback`,
    state: randomSecret(),
    code_challenge: pkceChallenge(verifier),
    code_challenge_method: "S256",
  };
}

/** The gateway's log has `line` (within a second: it is written as the answer goes out). */
async function logged(line: string | RegExp): Promise<void> {
  await stack.waitFor(
    async () => (typeof line === "string" ? stack.output().includes(line) : line.test(stack.output())),
    `the log line ${line}`,
    5_000,
  );
}

describe.skipIf(!haveChromium)("signing the CLI in", () => {
  beforeAll(async () => {
    if (!existsSync(`${ROOT}dist/dashboard/app.js`))
      execFileSync(process.execPath, [`${ROOT}scripts/build-dashboard.mjs`], { stdio: "inherit" });
    work = await mkdtemp(join(tmpdir(), "platform-signin-"));
    // The provider's port first: the gateway is told its issuer, the provider the gateway's redirect URI.
    idp = createServer();
    await new Promise<void>((resolve) => idp.listen(0, "127.0.0.1", resolve));
    issuer = `http://127.0.0.1:${(idp.address() as AddressInfo).port}`;
    stack = await startStack({
      env: {
        PLATFORM_OIDC_ISSUER: issuer,
        PLATFORM_OIDC_CLIENT_ID: OIDC_CLIENT.id,
        PLATFORM_OIDC_CLIENT_SECRET: OIDC_CLIENT.secret,
        PLATFORM_OIDC_NAME: "Example ID",
      },
    });
    const provider = new Provider(issuer, {
      clients: [
        {
          client_id: OIDC_CLIENT.id,
          client_secret: OIDC_CLIENT.secret,
          redirect_uris: [`${stack.baseUrl}/auth/oidc/callback`],
        },
      ],
      claims: { openid: ["sub"], profile: ["name", "org", "role"], email: ["email"] },
      // The organization and role ride in the ID token, as the gateway reads them.
      conformIdTokenClaims: false,
      cookies: { keys: ["a-cookie-signing-key-for-the-test-provider"] },
      // Lifetimes in seconds, given so the provider does not warn about its defaults.
      ttl: { Session: 3_600, Grant: 3_600, Interaction: 600, AccessToken: 600, IdToken: 600, AuthorizationCode: 60 },
      findAccount: (_ctx, id) => ({ accountId: id, claims: () => ({ sub: id, ...ACCOUNTS[id] }) }),
    });
    idp.on("request", provider.callback());
    ctl = connectControl(stack.redisUrl, "platform");
    for (const org of ["acme", "rival"])
      expect((await stack.admin("POST", "/admin/v1/orgs", { id: org })).status).toBe(201);
    for (const [name, org] of [
      ["acmeAdmin", "acme"],
      ["rivalAdmin", "rival"],
    ] as const) {
      const created = await stack.admin<{ id: string; key: string }>("POST", "/admin/v1/keys", {
        name: `${org}-admin`,
        role: "admin",
        org,
      });
      expect(created.status).toBe(201);
      keys[name] = created.body;
    }
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-quic",
        "--disable-sync",
      ],
    });
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await ctl?.redis.quit();
    await stack?.stop();
    await new Promise((r) => idp?.close(r));
    if (work) await rm(work, { recursive: true, force: true });
  });

  describe("platform auth login in a browser", () => {
    it("with an API key: $BROWSER gets the URL, the page asks for the key and shows what the CLI gets, the CLI stores a token", {
      timeout: 60_000,
    }, async () => {
      const run = await login("acme-browser");
      const url = new URL(await run.url());
      expect(url.origin + url.pathname).toBe(`${stack.baseUrl}/auth/authorize`);
      const redirect = url.searchParams.get("redirect_uri") as string;
      expect(redirect).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/callback$/);
      expect(url.searchParams.get("code_challenge_method")).toBe("S256");
      expect(url.searchParams.get("state")).toMatch(/^[\w-]{43}$/);

      const { context, page } = await freshPage();
      const signin = await page.goto(url.href);
      // A strict policy on the page: no script at all, never framed, forms to this origin and the provider's.
      const csp = (await signin?.allHeaders())?.["content-security-policy"] ?? "";
      expect(csp).toContain("script-src 'none'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toContain(`form-action 'self' ${issuer}`);
      const cookie = (await context.cookies()).find((c) => c.name === "platform_signin");
      expect(cookie).toMatchObject({ httpOnly: true, sameSite: "Lax", path: "/auth" });
      expect(await page.getByRole("button", { name: /^Sign in with Example ID$/ }).count()).toBe(1);

      await page.getByLabel("API key").fill("sk-plat-not-a-real-key");
      await page.getByRole("button", { name: "Sign in", exact: true }).click();
      await expect.poll(() => page.getByTestId("signin-error").textContent()).toBe("That API key is not valid.");
      await page.getByLabel("API key").fill(keys.acmeAdmin.key);
      await page.getByRole("button", { name: "Sign in", exact: true }).click();

      // Consent: what the CLI will get, and where it goes, before it gets it.
      await page.getByTestId("consent").waitFor();
      expect(await page.getByTestId("consent-name").textContent()).toBe("acme-admin");
      expect(await page.getByTestId("consent-org").textContent()).toBe("acme");
      expect(await page.getByTestId("consent-role").textContent()).toBe("admin");
      expect(await page.getByTestId("consent-lifetime").textContent()).toBe(
        "12 hours at a time, renewed by the CLI for up to 30 days",
      );
      expect(await page.getByTestId("consent-requester").textContent()).toContain(new URL(redirect).origin);
      await page.getByRole("button", { name: "Allow" }).click();
      await expect.poll(() => page.textContent("body")).toContain(`Signed in to ${stack.baseUrl} as acme-admin`);

      const result = await run.done;
      expect(result.code, result.stderr).toBe(0);
      // The URL is printed too, in case nothing opens.
      expect(result.stderr).toContain(url.href);
      expect(result.stdout).toMatch(
        new RegExp(
          `^logged in to ${stack.baseUrl} as acme-admin \\(admin of organization acme\\); token tok_[0-9a-f]{16} expires `,
        ),
      );
      const entry = (await credentialsIn(run.config)).registries[stack.baseUrl];
      expect(entry?.token).toMatch(/^pt_/);
      expect(entry?.refresh_token).toMatch(/^ptr_/);
      expect(Date.parse(entry?.expires ?? "")).toBeGreaterThan(Date.now() + 11 * 3_600_000);
      expect((await stat(join(run.config, "credentials.json"))).mode & 0o777).toBe(0o600);
      // The flow is over: its cookie is gone from the browser.
      expect((await context.cookies()).some((c) => c.name === "platform_signin")).toBe(false);
      await context.close();

      const status = await runCli(["auth", "status", "--json"], envFor(run.config));
      const me = JSON.parse(status.stdout) as { credential: string; org: string; role: string; token: { id: string } };
      expect(me).toMatchObject({
        registry: stack.baseUrl,
        credential: "token",
        org: "acme",
        role: "admin",
        id: keys.acmeAdmin.id,
      });
      acmeToken = { id: me.token.id, token: entry?.token as string };
      const listed = JSON.parse((await runCli(["auth", "tokens", "list", "--json"], envFor(run.config))).stdout) as {
        id: string;
      }[];
      expect(listed.map((t) => t.id)).toContain(acmeToken.id);
    });

    it("through the OpenID Connect provider: the user and its organization and role come from the ID token", {
      timeout: 60_000,
    }, async () => {
      const run = await login("alice");
      const { context, page } = await freshPage();
      await page.goto(await run.url());
      await page.getByRole("button", { name: "Sign in with Example ID" }).click();
      // The provider's own (development) login and consent pages.
      await page.locator("input[name=login]").fill("alice");
      await page.locator("input[name=password]").fill("any password");
      await page.getByRole("button", { name: "Sign-in" }).click();
      await page.getByRole("button", { name: "Continue" }).click();
      await page.getByTestId("consent").waitFor();
      expect(await page.getByTestId("consent-name").textContent()).toBe("Alice Example");
      expect(await page.getByTestId("consent-org").textContent()).toBe("acme");
      expect(await page.getByTestId("consent-role").textContent()).toBe("admin");
      await page.getByRole("button", { name: "Allow" }).click();
      const result = await run.done;
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toContain(`logged in to ${stack.baseUrl} as Alice Example (admin of organization acme)`);
      await context.close();
      const status = JSON.parse((await runCli(["auth", "status", "--json"], envFor(run.config))).stdout);
      expect(status).toMatchObject({
        kind: "token",
        name: "Alice Example",
        org: "acme",
        role: "admin",
        operator: false,
      });
      expect(status.id).toMatch(/^usr_[0-9a-f]{12}$/);
      // Alice, an admin of acme, sees her organization's sessions: the API key's and her own.
      const listed = JSON.parse((await runCli(["auth", "tokens", "list", "--json"], envFor(run.config))).stdout) as {
        id: string;
        subject: { kind: string };
      }[];
      expect(listed.map((t) => t.subject.kind).sort()).toEqual(["key", "user"]);
    });

    it("refuses a provider user whose organization does not exist, and one whose role is neither admin nor user", {
      timeout: 60_000,
    }, async () => {
      for (const [account, message, reason] of [
        ["ghost", 'puts you in the organization "ghost-corp", which does not exist on this platform', "org_not_found"],
        ["mallory", 'Your role per the "org" and "role" claims, "owner", is neither admin nor user', "claims_refused"],
      ] as const) {
        const run = await login(account);
        const { context, page } = await freshPage();
        await page.goto(await run.url());
        await page.getByRole("button", { name: "Sign in with Example ID" }).click();
        await page.locator("input[name=login]").fill(account);
        await page.locator("input[name=password]").fill("any password");
        await page.getByRole("button", { name: "Sign-in" }).click();
        await page.getByRole("button", { name: "Continue" }).click();
        await expect.poll(() => page.getByTestId("signin-message").textContent()).toContain(message);
        await logged(`sign-in refused: ${reason} (${account} of ${issuer})`);
        await context.close();
        run.child.kill("SIGINT");
        await run.done;
        expect(existsSync(join(run.config, "credentials.json"))).toBe(false);
      }
    });

    it("with --no-browser: a URL and a code to enter elsewhere, the CLI polling until it is approved (or denied)", {
      timeout: 90_000,
    }, async () => {
      const run = await login("rival-device", ["--no-browser"]);
      await stack.waitFor(async () => /Waiting for approval/.test(run.stderr()), "the code", 20_000);
      const code = (/enter the code ([A-Z]{4}-[A-Z]{4})/.exec(run.stderr()) ?? [])[1] as string;
      expect(code).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
      expect(run.stderr()).toContain(`open ${stack.baseUrl}/auth/device in a browser`);
      const { context, page } = await freshPage();
      // The code typed as a person might, lower case and without its dash.
      await page.goto(`${stack.baseUrl}/auth/device`);
      await page.getByLabel("Code").fill(code.toLowerCase().replace("-", ""));
      await page.getByRole("button", { name: "Continue" }).click();
      await page.getByLabel("API key").fill(keys.rivalAdmin.key);
      await page.getByRole("button", { name: "Sign in", exact: true }).click();
      expect(await page.getByTestId("consent-requester").textContent()).toContain(code);
      expect(await page.getByTestId("consent-org").textContent()).toBe("rival");
      await page.getByRole("button", { name: "Allow" }).click();
      await expect.poll(() => page.getByTestId("signin-message").textContent()).toMatch(/^Done/);
      const result = await run.done;
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toContain("as rival-admin (admin of organization rival)");
      // The browser hook was never used.
      expect(existsSync(join(work, "rival-device", "opened-url"))).toBe(false);
      expect((await credentialsIn(run.config)).registries[stack.baseUrl]?.token).toMatch(/^pt_/);

      // Denied in the browser: the CLI stops and says so.
      const denied = await login("denied-device", ["--no-browser"]);
      await stack.waitFor(async () => /Waiting for approval/.test(denied.stderr()), "the code", 20_000);
      await page.goto((/\(or open (\S+)\)/.exec(denied.stderr()) ?? [])[1] as string);
      await page.getByRole("button", { name: "Continue" }).click();
      await page.getByLabel("API key").fill(keys.rivalAdmin.key);
      await page.getByRole("button", { name: "Sign in", exact: true }).click();
      await page.getByRole("button", { name: "Deny" }).click();
      const refused = await denied.done;
      expect([refused.code, refused.stderr]).toEqual([
        1,
        expect.stringContaining("error: the sign-in was denied in the browser"),
      ]);
      await context.close();
    });
  });

  describe("attacks on the sign-in", () => {
    it("a callback with a wrong state: the CLI refuses it and stores nothing", { timeout: 30_000 }, async () => {
      const run = await login("wrong-state");
      const redirect = new URL(await run.url()).searchParams.get("redirect_uri") as string;
      const forged = await fetch(`${redirect}?code=${randomSecret()}&state=${randomSecret()}`);
      expect(forged.status).toBe(400);
      expect(await forged.text()).not.toMatch(/state/);
      const result = await run.done;
      expect(result.code).toBe(1);
      expect(result.stderr).toContain("refused the browser's answer: its state is not this sign-in's");
      expect(existsSync(join(run.config, "credentials.json"))).toBe(false);
    });

    it("a missing or wrong PKCE verifier, a replayed code, another redirect URI or client: invalid_grant, the reason logged", async () => {
      const refusals: Record<string, string>[] = [];
      const verifier = randomSecret();
      const query = loopbackQuery(verifier);
      const exchange = async (code: string, extra: Record<string, string>) =>
        tokenRequest({ grant_type: "authorization_code", code, redirect_uri: query.redirect_uri, ...extra });
      const codeOf = async () =>
        (await authorizeOverHttp(keys.acmeAdmin.key, query)).searchParams.get("code") as string;

      const missing = await exchange(await codeOf(), {});
      await logged("token request refused: verifier_missing");
      const wrong = await exchange(await codeOf(), { code_verifier: randomSecret() });
      await logged("token request refused: verifier_mismatch");
      const elsewhere = await exchange(await codeOf(), {
        code_verifier: verifier,
        redirect_uri: "http://127.0.0.1:40002/callback",
      });
      await logged("token request refused: redirect_mismatch");
      refusals.push(missing.body, wrong.body, elsewhere.body);
      for (const r of [missing, wrong, elsewhere]) expect(r.status).toBe(400);

      // The right verifier once: a token. The same code again: refused, and the token it gave revoked.
      const code = await codeOf();
      const first = await exchange(code, { code_verifier: verifier });
      expect(first.status).toBe(200);
      expect(first.body).toMatchObject({ token_type: "Bearer", org: "acme", role: "admin" });
      expect((await call(first.body.access_token as string, "GET", "/admin/v1/whoami")).status).toBe(200);
      const replay = await exchange(code, { code_verifier: verifier });
      await logged("token request refused: reused");
      refusals.push(replay.body);
      await stack.waitFor(
        async () => (await call(first.body.access_token as string, "GET", "/admin/v1/whoami")).status === 401,
        "the token of a replayed code to die",
        10_000,
      );
      // A spent code is spent whatever was wrong with its first use.
      const burnt = await codeOf();
      await exchange(burnt, {});
      refusals.push((await exchange(burnt, { code_verifier: verifier })).body);

      // Every refusal reads the same: nothing tells an attacker which check failed.
      expect(new Set(refusals.map((r) => JSON.stringify(r))).size).toBe(1);
      expect(refusals[0]?.error).toBe("invalid_grant");

      const client = await tokenRequest({
        client_id: "evil-app",
        grant_type: "authorization_code",
        code: await codeOf(),
      });
      expect([client.status, client.body.error]).toEqual([401, "invalid_client"]);
      await logged("token request refused: unknown_client");
    });

    it("an authorization request that is not the CLI's: a redirect URI off loopback is never redirected to; no S256, no state: refused", async () => {
      const verifier = randomSecret();
      for (const redirect of [
        "https://evil.example/callback",
        "http://127.0.0.1.evil.example:8080/callback",
        "http://127.0.0.1/callback",
        "http://127.0.0.1:8080/elsewhere",
        "http://127.0.0.1:8080/callback?next=https://evil.example",
        "http://user@127.0.0.1:8080/callback",
      ]) {
        const res = await fetch(
          `${stack.baseUrl}/auth/authorize?${new URLSearchParams({ ...loopbackQuery(verifier), redirect_uri: redirect })}`,
          { redirect: "manual" },
        );
        expect([res.status, res.headers.get("location"), res.headers.get("set-cookie")], redirect).toEqual([
          400,
          null,
          null,
        ]);
        const text = await res.text();
        expect(text).toContain("This sign-in request is not valid.");
        expect(text).not.toContain("evil");
      }
      await logged("authorization request refused: redirect_uri_not_loopback");
      const notS256 = await fetch(
        `${stack.baseUrl}/auth/authorize?${new URLSearchParams({ ...loopbackQuery(verifier), code_challenge_method: "plain" })}`,
        { redirect: "manual" },
      );
      const back = new URL(notS256.headers.get("location") as string);
      expect([back.origin, back.searchParams.get("error")]).toEqual(["http://127.0.0.1:40001", "invalid_request"]);
      expect(notS256.headers.get("set-cookie")).toBeNull();
      await logged("authorization request refused: pkce_not_s256");
      const { state: _, ...stateless } = loopbackQuery(verifier);
      const noState = await fetch(`${stack.baseUrl}/auth/authorize?${new URLSearchParams(stateless)}`, {
        redirect: "manual",
      });
      expect(new URL(noState.headers.get("location") as string).searchParams.get("error")).toBe("invalid_request");
      await logged("authorization request refused: state_missing");
    });

    it("a form posted without this browser's cookie or CSRF secret, and guessing keys or codes: refused, then the flow closed", async () => {
      const authorize = await fetch(
        `${stack.baseUrl}/auth/authorize?${new URLSearchParams(loopbackQuery(randomSecret()))}`,
        {
          redirect: "manual",
        },
      );
      const cookie = (authorize.headers.get("set-cookie") ?? "").split(";")[0] as string;
      const page = await (await fetch(`${stack.baseUrl}/auth/signin`, { headers: { cookie } })).text();
      const csrf = (/name="csrf" value="([^"]+)"/.exec(page) ?? [])[1] as string;
      const post = (fields: Record<string, string>, withCookie = true) =>
        fetch(`${stack.baseUrl}/auth/signin`, {
          ...form(fields),
          headers: { ...form({}).headers, ...(withCookie ? { cookie } : {}) },
          redirect: "manual",
        });
      // Another site's form (no cookie: SameSite=Lax keeps it from a cross-site POST), or a forged secret.
      expect((await post({ csrf, api_key: keys.acmeAdmin.key }, false)).status).toBe(400);
      await logged("sign-in refused: no_flow");
      const forged = await post({ csrf: randomSecret(), api_key: keys.acmeAdmin.key });
      expect(forged.status).toBe(403);
      expect(await forged.text()).toContain("This form does not belong to this browser");
      await logged("sign-in refused: csrf_mismatch");
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) statuses.push((await post({ csrf, api_key: `sk-plat-guess-${i}` })).status);
      expect(statuses).toEqual([401, 401, 401, 401, 429]);
      await logged("sign-in refused: wrong_api_key");
      // The flow is closed: even the right key no longer gets in through it.
      expect((await post({ csrf, api_key: keys.acmeAdmin.key })).status).toBe(400);

      // Device codes: a wrong user code is refused; an unknown device code polled is invalid_grant.
      const unknown = await tokenRequest({
        grant_type: "urn:ietf:params:oauth:grant-type:device_code",
        device_code: randomSecret(),
      });
      expect([unknown.status, unknown.body.error]).toEqual([400, "invalid_grant"]);
      await logged("device token request refused: unknown_device_code");
    });

    it("an expired token and a revoked one (from the dashboard): the CLI says the session expired, exit 1", {
      timeout: 60_000,
    }, async () => {
      // Expired: a session whose access token and refresh window both passed.
      const config = join(work, "expired", "config");
      await mkdir(config, { recursive: true, mode: 0o700 });
      const grant = await issueToken(
        ctl,
        { kind: "key", id: keys.acmeAdmin.id },
        { ttlMs: 1_000, refreshTtlMs: 1_500 },
      );
      await writeFile(
        join(config, "credentials.json"),
        JSON.stringify({
          registries: {
            [stack.baseUrl]: {
              token: grant.token,
              refresh_token: grant.refresh_token,
              expires: new Date(grant.expires).toISOString(),
            },
          },
          default: stack.baseUrl,
        }),
        { mode: 0o600 },
      );
      // The session has ended once Redis has let its record expire (at the end of its refresh window).
      await expect.poll(() => ctl.redis.exists(ctl.keys.token(grant.record.id))).toBe(0);
      const expired = await runCli(["auth", "status"], envFor(config));
      expect([expired.code, expired.stderr.trim(), expired.stdout]).toEqual([
        1,
        `session expired for ${stack.baseUrl}: run platform auth login`,
        "",
      ]);

      // Revoked: the operator revokes the acme admin's CLI token in the dashboard's tokens section.
      const { context, page } = await freshPage();
      await page.goto(`${stack.baseUrl}/dashboard`);
      await page.locator("input[name=key]").fill(stack.apiKey);
      await page.getByRole("button", { name: "Sign in", exact: true }).click();
      const row = page.getByTestId(`token-${acmeToken.id}`);
      await expect.poll(() => row.textContent(), { timeout: 10_000 }).toContain("acme");
      page.once("dialog", (d) => void d.accept());
      await row.getByRole("button", { name: "Revoke" }).click();
      await expect.poll(() => page.getByTestId("notice").textContent()).toBe(`revoke token ${acmeToken.id}: done`);
      await expect.poll(() => row.count()).toBe(0);
      await context.close();
      const config2 = join(work, "acme-browser", "config");
      await stack.waitFor(
        async () => (await runCli(["auth", "status"], envFor(config2))).code === 1,
        "the revoked token to stop working",
        15_000,
      );
      const revoked = await runCli(["keys", "list"], envFor(config2));
      expect([revoked.code, revoked.stderr.trim()]).toEqual([
        1,
        `session expired for ${stack.baseUrl}: run platform auth login`,
      ]);
      expect((await call(acmeToken.token, "GET", "/admin/v1/whoami")).body).toMatchObject({
        error: { code: "token_expired" },
      });
    });

    it("a token of another organization: the first's tokens, keys and organization are 404 to it", async () => {
      const rival = (await credentialsIn(join(work, "rival-device", "config"))).registries[stack.baseUrl]
        ?.token as string;
      const alice = JSON.parse(
        (await runCli(["auth", "tokens", "list", "--json"], envFor(join(work, "alice", "config")))).stdout,
      ) as { id: string; subject: { kind: string } }[];
      const aliceToken = alice.find((t) => t.subject.kind === "user")?.id as string;
      const denied = [
        await call(rival, "DELETE", `/admin/v1/tokens/${aliceToken}`),
        await call(rival, "GET", `/admin/v1/keys/${keys.acmeAdmin.id}`),
        await call(rival, "GET", "/admin/v1/orgs/acme"),
      ];
      expect(denied.map((r) => r.status)).toEqual([404, 404, 404]);
      const listed = await call<{ data: { org: string }[] }>(rival, "GET", "/admin/v1/tokens");
      expect(listed.body.data.every((t) => t.org === "rival")).toBe(true);
      const revoke = await runCli(
        ["auth", "tokens", "revoke", aliceToken],
        envFor(join(work, "rival-device", "config")),
      );
      expect([revoke.code, revoke.stderr]).toEqual([1, expect.stringContaining("token_not_found")]);
    });

    it("auth logout revokes the token on the server and deletes it here", async () => {
      const config = join(work, "alice", "config");
      const token = (await credentialsIn(config)).registries[stack.baseUrl]?.token as string;
      const out = await runCli(["auth", "logout"], envFor(config));
      expect(out.code, out.stderr).toBe(0);
      expect(out.stdout).toMatch(new RegExp(`^logged out of ${stack.baseUrl}; token tok_[0-9a-f]{16} revoked`));
      expect(await credentialsIn(config)).toEqual({ registries: {} });
      await stack.waitFor(
        async () => (await call(token, "GET", "/admin/v1/whoami")).status === 401,
        "the logged-out token to stop working",
        10_000,
      );
      const again = await runCli(["auth", "logout", "--registry-url", stack.baseUrl], envFor(config));
      expect([again.code, again.stderr]).toEqual([1, expect.stringContaining(`not logged in to ${stack.baseUrl}`)]);
    });
  });
});
