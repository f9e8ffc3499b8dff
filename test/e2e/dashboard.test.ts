/**
 * The web dashboard end to end: the shared `platform up` stack (the tiny model registered as v1
 * and v2 under a name of this file's own, an endpoint on v1; other files' things are on the page
 * too), Debian's headless chromium driven by playwright-core. The page is used as a person would:
 * a wrong key is refused, the admin key signs in, a 50/50 A/B test is started and an API key
 * created from the page's own forms, and traffic sent from here shows up in the page's numbers. A
 * screenshot is kept in test/artifacts/dashboard.png. Skipped, saying so, where /usr/bin/chromium
 * is absent (`.ci/run` installs it).
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyModelPath } from "../helpers/models.ts";
import { deploy, undeploy } from "../helpers/deploy.ts";
import { sharedStack, unique } from "../helpers/shared-stack.ts";
import type { Stack } from "../helpers/stack.ts";

const CHROMIUM = "/usr/bin/chromium";
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const ARTIFACTS = `${ROOT}test/artifacts`;
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium)
  console.warn(`dashboard test skipped: ${CHROMIUM} not found (apt-get install chromium; .ci/run installs it)`);

const NAME = unique("dash");
const KEY = `${NAME}-key`;

let stack: Stack;
let browser: Browser;
let page: Page;

describe.skipIf(!haveChromium)("the web dashboard", () => {
  beforeAll(async () => {
    // The bundle is a build output (npm ci's prepare builds it); build it here if this checkout lacks it.
    if (!existsSync(`${ROOT}dist/dashboard/app.js`))
      execFileSync(process.execPath, [`${ROOT}scripts/build-dashboard.mjs`], { stdio: "inherit" });
    const modelPath = await tinyModelPath();
    stack = await sharedStack();
    for (const version of ["v1", "v2"]) {
      const reg = await stack.admin("POST", "/admin/v1/models", {
        name: NAME,
        framework: "llamacpp",
        source: modelPath,
        version,
      });
      expect(reg.status, JSON.stringify(reg.body)).toBe(201);
    }
    await deploy(stack, NAME, { version: "v1", endpoint: { resources: { replicas: 1, parallel: 4 } } });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
    page = await browser.newPage({ viewport: { width: 1280, height: 1400 } });
  }, 180_000);

  afterAll(async () => {
    await browser?.close();
    await undeploy(stack, NAME);
  });

  const card = () => page.getByTestId(`endpoint-${NAME}`);
  const complete = async () => {
    const res = await fetch(`${stack.baseUrl}/v1/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: NAME, prompt: "Once upon a time", max_tokens: 4, temperature: 0 }),
    });
    await res.arrayBuffer();
    return { status: res.status, version: res.headers.get("x-model-version") };
  };

  it("serves its files without a key, and the API behind it still wants one", async () => {
    const html = await fetch(`${stack.baseUrl}/dashboard`);
    expect(html.status).toBe(200);
    expect(html.headers.get("content-type")).toMatch(/text\/html/);
    expect(await html.text()).toMatch(/\/dashboard\/app\.js/);
    const js = await fetch(`${stack.baseUrl}/dashboard/app.js`);
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toMatch(/javascript/);
    expect((await fetch(`${stack.baseUrl}/admin/v1/endpoints`)).status).toBe(401);
    // `platform up` says where it is.
    expect(stack.output()).toContain(`dashboard  ${stack.baseUrl}/dashboard`);
  });

  it("refuses a wrong key; a non-operator key sees only its organization's services and protos; then the admin key", async () => {
    await page.goto(`${stack.baseUrl}/dashboard`);
    await page.locator("input[name=key]").fill("sk-plat-not-a-real-key");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect.poll(() => page.getByTestId("login-error").textContent()).toMatch(/not valid/);

    const user = await stack.admin<{ key: string }>("POST", "/admin/v1/keys", { name: `${NAME}-user`, role: "user" });
    await page.locator("input[name=key]").fill(user.body.key);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByTestId("team-dashboard").waitFor();
    expect(await page.getByTestId("services").isVisible()).toBe(true);
    expect(await page.getByTestId(`endpoint-${NAME}`).count()).toBe(0);
    await page.getByRole("button", { name: "Sign out" }).click();

    await page.locator("input[name=key]").fill(stack.apiKey);
    await page.getByRole("button", { name: "Sign in" }).click();
    await card().waitFor();
    expect(await card().getByTestId("version").textContent()).toBe(`${NAME}@v1`);
    await expect.poll(() => card().getByTestId("replicas").textContent(), { timeout: 10_000 }).toBe("1/1");
    // Only in this tab's sessionStorage, never in localStorage or a cookie.
    expect(await page.evaluate(() => sessionStorage.getItem("platform.dashboard.key"))).toBe(stack.apiKey);
    expect(await page.evaluate(() => localStorage.length)).toBe(0);
    expect((await page.context().cookies()).length).toBe(0);
  });

  it("lists the registered versions with their evaluation results (training evaluate)", {
    timeout: 120_000,
  }, async () => {
    const form = new FormData();
    form.append("purpose", "batch");
    const texts = ["Once upon a time there was a girl.", "The dog ran to the park."];
    form.append("file", new Blob([texts.map((text) => JSON.stringify({ text })).join("\n")]), "texts.jsonl");
    const upload = await fetch(`${stack.baseUrl}/v1/files`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.apiKey}` },
      body: form,
    });
    expect(upload.status).toBe(200);
    const file = (await upload.json()) as { id: string };
    const created = await stack.admin<{ id: string }>("POST", "/admin/v1/evaluations", {
      model: `${NAME}@v1`,
      dataset: file.id,
      metric: "perplexity",
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await stack.waitFor(
      async () =>
        (await stack.admin<{ state: string }>("GET", `/admin/v1/evaluations/${created.body.id}`)).body.state ===
        "succeeded",
      `the evaluation of ${NAME}@v1`,
    );
    await page.reload();
    await card().waitFor();
    await expect
      .poll(() => page.getByTestId(`evaluations-${NAME}@v1`).textContent(), { timeout: 15_000 })
      .toMatch(/^perplexity [0-9.e+]+ ± [0-9.e+]+ \(n 2\)$/);
    expect(await page.getByTestId(`evaluations-${NAME}@v2`).textContent()).toBe("–");
  });

  it("starts a 50/50 A/B test with v2 from the page and shows the split", { timeout: 180_000 }, async () => {
    const form = card().getByTestId("abtest-form");
    await form.locator("input[name=split]").fill("v1=50,v2=50");
    await form.getByRole("button", { name: "Start A/B test" }).click();
    await expect
      .poll(() => page.getByTestId("notice").textContent())
      .toMatch(new RegExp(`start A/B test on ${NAME}: done`));
    // v2's replica has to load and warm up before the test splits traffic.
    await expect
      .poll(() => card().getByTestId("split").textContent(), { timeout: 150_000, interval: 1_000 })
      .toBe("v1=50,v2=50 (running)");
    const cells = await card()
      .getByTestId("variants")
      .locator("tbody tr")
      .evaluateAll((rows) =>
        rows.map((r) =>
          [...r.querySelectorAll("td")]
            .slice(0, 2)
            .map((td) => td.textContent)
            .join("="),
        ),
      );
    expect(cells.sort()).toEqual(["v1=50", "v2=50"]);
  });

  it("shows traffic sent to the endpoint in its numbers and charts, per version in the split", {
    timeout: 120_000,
  }, async () => {
    const versions = new Set<string | null>();
    // Traffic keeps flowing while the page polls, so at least one 2 s interval sees it.
    let sending = true;
    const traffic = (async () => {
      while (sending) {
        const r = await complete();
        expect(r.status).toBe(200);
        versions.add(r.version);
      }
    })();
    try {
      await expect
        .poll(async () => Number(await card().getByTestId("requests-total").textContent()), {
          timeout: 60_000,
          interval: 500,
        })
        .toBeGreaterThan(0);
      await expect
        .poll(async () => Number(await card().getByTestId("requests-rate").textContent()), {
          timeout: 60_000,
          interval: 500,
        })
        .toBeGreaterThan(0);
      // The charts' legends carry the latest values: a latency was observed, tokens were generated.
      await expect
        .poll(async () => await card().getByTestId("chart-latency").locator("figcaption").textContent(), {
          timeout: 60_000,
          interval: 500,
        })
        .toMatch(/p50 \d/);
      await expect
        .poll(async () => await card().getByTestId("chart-tokens").locator("figcaption").textContent(), {
          timeout: 60_000,
          interval: 500,
        })
        .toMatch(/now \d/);
      // The variant table counts requests per version once both have answered some.
      await expect.poll(() => versions.size, { timeout: 60_000 }).toBe(2);
      const column = (n: number) =>
        card().getByTestId("variants").locator(`tbody tr td:nth-child(${n})`).allTextContents();
      await expect
        .poll(async () => (await column(5)).map(Number), { timeout: 30_000 })
        .toSatisfy((counts: number[]) => counts.length === 2 && counts.every((c) => c > 0));
      expect(await card().locator("svg path.line").count()).toBeGreaterThanOrEqual(5);
    } finally {
      sending = false;
      await traffic;
    }
    await mkdir(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: `${ARTIFACTS}/dashboard.png`, fullPage: true });
    expect(existsSync(`${ARTIFACTS}/dashboard.png`)).toBe(true);
  });

  it("sets autoscaling bounds, replicas and a deployment, and creates and revokes an API key with limits from the page", async () => {
    const scaling = card().getByTestId("autoscaling-form");
    await scaling.locator("input[name=min]").fill("1");
    await scaling.locator("input[name=max]").fill("3");
    await scaling.getByRole("button", { name: "Set autoscaling" }).click();
    await expect
      .poll(() => page.getByTestId("notice").textContent())
      .toMatch(new RegExp(`autoscaling of ${NAME}: done`));
    const applied = await stack.admin<{ config: { min_replicas: number; max_replicas: number } }>(
      "GET",
      `/admin/v1/endpoints/${NAME}/autoscaling`,
    );
    expect(applied.body.config).toMatchObject({ min_replicas: 1, max_replicas: 3 });

    // Replicas and deploys PUT the endpoint's stored deployment back with one field changed: its parallel stays 4.
    const replicas = card().getByTestId("replicas-form");
    await replicas.locator("input[name=replicas]").fill("1");
    await replicas.getByRole("button", { name: "Set replicas" }).click();
    await expect.poll(() => page.getByTestId("notice").textContent()).toMatch(new RegExp(`replicas of ${NAME}: done`));
    const form = page.getByTestId("deploy-form");
    // Other files' models are in the form's list too, on the shared stack: pick this file's.
    await form.locator("select[name=model]").selectOption(NAME);
    await form.locator("select[name=version]").selectOption("v2");
    await form.locator("input[name=endpoint]").fill(NAME);
    await form.getByRole("button", { name: "Deploy" }).click();
    // A version change under a running A/B test is refused, and the page says why.
    await expect
      .poll(() => page.getByTestId("error").textContent())
      .toMatch(new RegExp(`deploy ${NAME}@v2 as ${NAME}: .*A/B test`, "i"));
    // It outlives the page's next refresh (every 2 s), so a user has time to read it.
    await page.waitForTimeout(2_500);
    expect(await page.getByTestId("error").textContent()).toMatch(
      new RegExp(`deploy ${NAME}@v2 as ${NAME}: .*A/B test`, "i"),
    );
    await form.locator("select[name=version]").selectOption("v1");
    await form.getByRole("button", { name: "Deploy" }).click();
    await expect
      .poll(() => page.getByTestId("notice").textContent())
      .toMatch(new RegExp(`deploy ${NAME}@v1 as ${NAME}: done`));
    const endpoint = await stack.admin<{ config: { resources: { replicas: number; parallel: number } } }>(
      "GET",
      `/admin/v1/endpoints/${NAME}`,
    );
    expect(endpoint.body.config.resources).toMatchObject({ replicas: 1, parallel: 4 });

    const keys = page.getByTestId("key-form");
    await keys.locator("input[name=name]").fill(KEY);
    await keys.locator("input[name=rpm]").fill("60");
    await keys.locator("input[name=max_concurrency]").fill("2");
    await keys.getByRole("button", { name: "Create key" }).click();
    await expect.poll(() => page.getByTestId("created-key").textContent()).toMatch(/sk-plat-/);
    const row = page.getByTestId(`key-${KEY}`);
    await expect.poll(() => row.textContent()).toMatch(/rpm=60; max_concurrency=2/);

    page.once("dialog", (d) => void d.accept());
    await row.getByRole("button", { name: "Revoke" }).click();
    await expect.poll(() => page.getByTestId("notice").textContent()).toMatch(new RegExp(`revoke key ${KEY}: done`));
    await expect.poll(() => row.count()).toBe(0);
  });
});
