/**
 * The sign-in pages (docs/signin.md): plain server-rendered HTML, no script, styled by the
 * dashboard's stylesheet. Every value is escaped by hono/html; every form carries its flow's CSRF
 * secret. The accessible names are part of the interface: the field **API key**, the buttons
 * **Sign in**, **Sign in with <provider>**, **Allow** and **Deny**.
 */
import { html } from "hono/html";

type Page = ReturnType<typeof html>;

function layout(title: string, body: Page | Page[]): Page {
  return html`<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="referrer" content="no-referrer" />
    <title>${title} · platform</title>
    <link rel="stylesheet" href="/dashboard/style.css" />
  </head>
  <body>
    <main class="signin">
      <header><h1>platform</h1></header>
      <section>
        <h2>${title}</h2>
        ${body}
      </section>
    </main>
  </body>
</html>`;
}

const csrfField = (csrf: string) => html`<input type="hidden" name="csrf" value="${csrf}" />`;

const errorLine = (error: string | undefined) =>
  error ? html`<p class="error" role="alert" data-testid="signin-error">${error}</p>` : html``;

/** Who is asking, as the pages name it: the CLI on this machine (its loopback port), or a device and its code. */
export type Requester = { kind: "loopback"; origin: string } | { kind: "device"; userCode: string };

const requesterLine = (r: Requester) =>
  r.kind === "loopback"
    ? html`the platform CLI on this computer, listening at <code>${r.origin}</code>`
    : html`the platform CLI on the device that shows the code <code>${r.userCode}</code>`;

export function signInPage(p: { csrf: string; requester: Requester; provider?: string; error?: string }): Page {
  return layout("Sign in", [
    html`<p>Sign in to give ${requesterLine(p.requester)} a token; you will see what it gets before it gets it.</p>`,
    errorLine(p.error),
    p.provider
      ? html`<form method="post" action="/auth/oidc/start">
          ${csrfField(p.csrf)}
          <button type="submit">Sign in with ${p.provider}</button>
        </form>
        <p class="hint">Or with an API key:</p>`
      : html``,
    html`<form method="post" action="/auth/signin" class="row">
      ${csrfField(p.csrf)}
      <label for="api_key">API key</label>
      <input id="api_key" name="api_key" type="password" autocomplete="off" required maxlength="200" placeholder="sk-plat-…" />
      <button type="submit">Sign in</button>
    </form>`,
  ]);
}

export function consentPage(p: {
  csrf: string;
  requester: Requester;
  name: string;
  org: string;
  role: string;
  lifetime: string;
  session: string;
}): Page {
  return layout("Give the CLI a token?", [
    html`<p>${requesterLine(p.requester)} asks for a token to act as you:</p>
      <dl data-testid="consent">
        <dt>Signed in as</dt>
        <dd data-testid="consent-name">${p.name}</dd>
        <dt>Organization</dt>
        <dd data-testid="consent-org">${p.org}</dd>
        <dt>Role</dt>
        <dd data-testid="consent-role">${p.role}</dd>
        <dt>Lifetime</dt>
        <dd data-testid="consent-lifetime">${p.lifetime} at a time, renewed by the CLI for up to ${p.session}</dd>
        <dt>Goes to</dt>
        <dd data-testid="consent-requester">${requesterLine(p.requester)}</dd>
      </dl>
      <p class="hint">Allow only if you started this sign-in yourself. <code>platform auth tokens list</code> shows your tokens and <code>platform auth tokens revoke</code> ends one.</p>
      <form method="post" action="/auth/consent" class="row">
        ${csrfField(p.csrf)}
        <button type="submit" name="decision" value="allow">Allow</button>
        <button type="submit" name="decision" value="deny" class="danger">Deny</button>
      </form>`,
  ]);
}

export function devicePage(p: { csrf: string; userCode?: string; error?: string }): Page {
  return layout("Connect a device", [
    html`<p>Enter the code the platform CLI shows (<code>platform auth login --no-browser</code>).</p>`,
    errorLine(p.error),
    html`<form method="post" action="/auth/device" class="row">
      ${csrfField(p.csrf)}
      <label for="user_code">Code</label>
      <input id="user_code" name="user_code" autocomplete="off" required maxlength="20" placeholder="BCDF-GHJK" value="${p.userCode ?? ""}" />
      <button type="submit">Continue</button>
    </form>`,
  ]);
}

/** A page that ends a flow: done, denied, or refused with the reason the person may know. */
export function messagePage(title: string, message: string): Page {
  return layout(title, html`<p data-testid="signin-message">${message}</p>`);
}
