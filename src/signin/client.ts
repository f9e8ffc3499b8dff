/**
 * Signing in from the command line, the native client's side (docs/signin.md; `platform auth
 * login` calls it). In a browser, as a native app (RFC 8252): a
 * listener on 127.0.0.1 and a random port receives the authorization code, a random `state` ties
 * the answer to this sign-in, and PKCE (S256) ties the code to this process. Without one, the
 * device authorization grant (RFC 8628): a URL and a short code to enter elsewhere, and polling.
 * Either way the gateway's token endpoint hands over the platform's token pair.
 */
import { spawn } from "node:child_process";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { platform } from "node:os";
import { CALLBACK_PATH, CLI_CLIENT_ID, DEVICE_GRANT, pkceChallenge, randomSecret, sameSecret } from "./oauth.ts";
import { CommandError } from "../process/command-error.ts";
import { reach } from "../process/reach.ts";

/** What the token endpoint answers (src/gateway/routes/oauth.ts). */
export type SignedIn = {
  access_token: string;
  refresh_token: string;
  id: string;
  expires: number;
  name: string;
  org: string;
  role: string;
};

type TokenError = { error?: string; error_description?: string; interval?: number };

/** As long as the gateway keeps a sign-in open. */
const WAIT_MS = 10 * 60_000;

/** Opens `url` with BROWSER (a command; the URL its last argument) or the system's opener; a failure is silent, the URL being printed too. */
export function openBrowser(url: string, browser: string | undefined): void {
  const opener = browser?.trim()
    ? browser.trim().split(/\s+/)
    : platform() === "darwin"
      ? ["open"]
      : platform() === "win32"
        ? ["rundll32", "url.dll,FileProtocolHandler"]
        : ["xdg-open"];
  const [command, ...args] = opener as [string, ...string[]];
  const child = spawn(command, [...args, url], { stdio: "ignore", detached: true });
  child.on("error", () => undefined);
  child.unref();
}

async function tokenRequest(baseUrl: string, form: Record<string, string>): Promise<SignedIn | TokenError> {
  const res = await reach(baseUrl, `${baseUrl}/auth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ client_id: CLI_CLIENT_ID, ...form }),
  });
  const body = (await res.json().catch(() => ({ error: `HTTP ${res.status}` }))) as SignedIn | TokenError;
  return res.ok ? body : "error" in body ? body : { error: `HTTP ${res.status}` };
}

const refusedBy = (e: TokenError) =>
  new CommandError(
    `the platform refused the sign-in: ${e.error}${e.error_description ? ` (${e.error_description})` : ""}`,
  );

function answerBrowser(res: ServerResponse, status: number, message: string): void {
  const text = message.replace(/[&<>"]/g, (ch) => `&#${ch.charCodeAt(0)};`);
  res.writeHead(status, {
    "content-type": "text/html; charset=utf-8",
    "cache-control": "no-store",
    "content-security-policy": "default-src 'none'",
  });
  res.end(`<!doctype html><html lang="en"><meta charset="utf-8"><title>platform</title><p>${text}</p></html>`);
}

/**
 * Signs in through a browser: `open` is handed the gateway's authorization URL (which is also
 * printed by the caller), and the answer comes back to this process's loopback listener.
 */
export async function signInWithBrowser(baseUrl: string, open: (url: string) => void): Promise<SignedIn> {
  const state = randomSecret();
  const verifier = randomSecret();
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const redirectUri = `http://127.0.0.1:${(server.address() as AddressInfo).port}${CALLBACK_PATH}`;
  const url = new URL(`${baseUrl}/auth/authorize`);
  for (const [k, v] of Object.entries({
    response_type: "code",
    client_id: CLI_CLIENT_ID,
    redirect_uri: redirectUri,
    state,
    code_challenge: pkceChallenge(verifier),
    code_challenge_method: "S256",
  }))
    url.searchParams.set(k, v);

  /** The browser's answer, judged: only one with this sign-in's state is taken, then traded with the verifier. */
  const judge = async (answer: URLSearchParams): Promise<SignedIn> => {
    if (!sameSecret(answer.get("state") ?? "", state))
      throw new CommandError(
        "refused the browser's answer: its state is not this sign-in's (a forged or stale redirect); nothing was stored. Run platform auth login again.",
      );
    const error = answer.get("error");
    if (error)
      throw new CommandError(
        error === "access_denied" ? "the sign-in was denied in the browser" : `the sign-in did not complete: ${error}`,
      );
    const code = answer.get("code");
    if (!code) throw new CommandError("the browser's answer carries no code; run platform auth login again");
    const result = await tokenRequest(baseUrl, {
      grant_type: "authorization_code",
      code,
      redirect_uri: redirectUri,
      code_verifier: verifier,
    });
    if ("error" in result) throw refusedBy(result);
    return result as SignedIn;
  };

  try {
    return await new Promise<SignedIn>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new CommandError("no answer from the browser in 10 minutes; run platform auth login again")),
        WAIT_MS,
      );
      server.on("request", (req, res) => {
        const got = new URL(req.url ?? "/", redirectUri);
        if (req.method !== "GET" || got.pathname !== CALLBACK_PATH) return answerBrowser(res, 404, "Not here.");
        // One answer per sign-in: whatever it holds, the listener takes no other.
        server.removeAllListeners("request");
        clearTimeout(timer);
        judge(got.searchParams).then(
          (signedIn) => {
            answerBrowser(res, 200, `Signed in to ${baseUrl} as ${signedIn.name}. You can close this tab.`);
            resolve(signedIn);
          },
          (e: unknown) => {
            answerBrowser(res, 400, "The sign-in did not complete: the terminal says why.");
            reject(e);
          },
        );
      });
      open(url.href);
    });
  } finally {
    server.close();
    server.closeAllConnections();
  }
}

/**
 * Signs in with a device code: `show` is given the URL and the code to enter elsewhere; this
 * process polls at the gateway's interval, longer each time it says `slow_down`.
 */
export async function signInWithDevice(baseUrl: string, show: (text: string) => void): Promise<SignedIn> {
  const res = await reach(baseUrl, `${baseUrl}/auth/device/code`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ client_id: CLI_CLIENT_ID }),
  });
  const started = (await res.json().catch(() => ({ error: `HTTP ${res.status}` }))) as TokenError & {
    device_code: string;
    user_code: string;
    verification_uri: string;
    verification_uri_complete: string;
    expires_in: number;
    interval: number;
  };
  if (!res.ok) throw refusedBy(started);
  show(
    `To sign in, open ${started.verification_uri} in a browser on any device and enter the code ${started.user_code}\n` +
      `(or open ${started.verification_uri_complete}). Waiting for approval…`,
  );
  const deadline = Date.now() + started.expires_in * 1000;
  let interval = started.interval * 1000;
  for (;;) {
    await new Promise((r) => setTimeout(r, interval));
    if (Date.now() > deadline)
      throw new CommandError("the code expired before it was approved; run platform auth login --no-browser again");
    const result = await tokenRequest(baseUrl, { grant_type: DEVICE_GRANT, device_code: started.device_code });
    if (!("error" in result)) return result as SignedIn;
    switch (result.error) {
      case "authorization_pending":
        continue;
      case "slow_down":
        interval = result.interval ? result.interval * 1000 : interval + 5_000;
        continue;
      case "expired_token":
        throw new CommandError("the code expired before it was approved; run platform auth login --no-browser again");
      case "access_denied":
        throw new CommandError("the sign-in was denied in the browser");
      default:
        throw refusedBy(result);
    }
  }
}
