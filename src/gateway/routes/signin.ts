/**
 * The sign-in pages the CLI sends a browser to (docs/signin.md), under /auth:
 *
 *   GET  /authorize         the CLI's authorization request (RFC 8252 loopback redirect, PKCE S256): opens a flow
 *   GET  /device            the device flow's page: enter the code the CLI shows (RFC 8628)
 *   POST /device            the code entered → the sign-in page
 *   GET  /signin            sign in: an API key, or the identity provider when one is configured
 *   POST /signin            the API key → the consent page
 *   POST /oidc/start        → the identity provider (authorization code flow with PKCE)
 *   GET  /oidc/callback     ← the identity provider; the user from the ID token's claims → the consent page
 *   GET  /consent           what the CLI will get: organization, role, lifetime, who receives it
 *   POST /consent           allow: a code to the loopback redirect, or the device code approved; deny: neither
 *
 * A flow lives in Redis (src/signin/flows.ts) under the SHA-256 of a cookie (HttpOnly, SameSite=Lax,
 * path /auth, 10 minutes); every form carries the flow's CSRF secret. Refusals are logged with their
 * reason and the request id; the pages say only what the person in front of them may know.
 */
import type { Context } from "hono";
import { Hono } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { verifyApiKey } from "../../keys/store.ts";
import { findOrg } from "../../orgs/store.ts";
import type { Control } from "../../redis/connection.ts";
import { placementOf } from "../../signin/claims.ts";
import { issueCode } from "../../signin/codes.ts";
import { decideDevice, findDevice } from "../../signin/devices.ts";
import {
  closeFlow,
  countAttempt,
  csrfMatches,
  FLOW_TTL_MS,
  type Flow,
  openFlow,
  readFlow,
  updateFlow,
} from "../../signin/flows.ts";
import { CLI_CLIENT_ID, loopbackRedirect, PKCE_PATTERN, randomSecret, sameSecret } from "../../signin/oauth.ts";
import { allowOpenFrom, clientAddress } from "../../signin/per-client.ts";
import type { OidcProvider } from "../../signin/oidc.ts";
import { logger } from "../../telemetry/log.ts";
import type { TokenLifetimes } from "../../tokens/store.ts";
import { upsertUser } from "../../users/store.ts";
import type { GatewayEnv } from "../env.ts";
import { allowFormTarget, pageHeaders } from "../page-headers.ts";
import { consentPage, devicePage, messagePage, type Requester, signInPage } from "../signin-pages.ts";

const log = logger("signin");

const COOKIE = "platform_signin";
/** The device page's CSRF secret before any flow exists (GET /device allocates nothing). */
const DEVICE_COOKIE = "platform_device";
const START_AGAIN = "Start again from the terminal: platform auth login.";

export type SigninDeps = {
  ctl: Control;
  lifetimes: TokenLifetimes;
  /** PLATFORM_PUBLIC_URL: the gateway as browsers reach it; unset, each request's own origin. */
  publicUrl: string | undefined;
  oidc: OidcProvider | undefined;
  /** Sign-ins one client address may open a minute, and the trusted proxies in front (src/signin/per-client.ts). */
  opensPerMinute: number;
  proxyHops: number;
};

/** The client address a request came from: its socket's peer, or what trusted proxies say (per-client.ts). */
export function requestAddress(c: Context, proxyHops: number): string {
  const peer = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket
    ?.remoteAddress;
  return clientAddress(peer, c.req.header("x-forwarded-for"), proxyHops);
}

export function baseUrlOf(c: Context, publicUrl: string | undefined): string {
  return publicUrl ?? new URL(c.req.url).origin;
}

/** The string fields of an application/x-www-form-urlencoded body (what forms and OAuth clients send); undefined for another type. */
export async function formFields(c: Context): Promise<Record<string, string> | undefined> {
  if (!c.req.header("content-type")?.startsWith("application/x-www-form-urlencoded")) return undefined;
  const body = await c.req.parseBody();
  return Object.fromEntries(Object.entries(body).flatMap(([k, v]) => (typeof v === "string" ? [[k, v]] : [])));
}

/** "12 hours", "30 days": a lifetime as the consent page says it. */
export function describeLifetime(ms: number): string {
  const units: [number, string][] = [
    [86_400_000, "day"],
    [3_600_000, "hour"],
    [60_000, "minute"],
  ];
  const [size, unit] = units.find(([size]) => ms >= size && ms % size === 0) ?? [1_000, "second"];
  const n = Math.round(ms / size);
  return `${n} ${unit}${n === 1 ? "" : "s"}`;
}

/** A refusal for the operator's log: its reason, the request id, and what was refused; never a secret. */
function refused(c: Context<GatewayEnv>, reason: string, what = "sign-in"): void {
  log.warn({ request_id: c.get("requestId"), reason }, `${what} refused: ${reason}`);
}

/** A device flow signs in only once its code was entered: the code says which device the token goes to. */
const ready = (flow: Flow) => flow.kind === "code" || flow.device !== undefined;

function requesterOf(flow: Flow): Requester {
  return flow.kind === "code"
    ? { kind: "loopback", origin: new URL(flow.redirect_uri as string).origin }
    : { kind: "device", userCode: flow.user_code ?? "" };
}

export function signinRoutes({ ctl, lifetimes, publicUrl, oidc, opensPerMinute, proxyHops }: SigninDeps) {
  const app = new Hono<GatewayEnv>();
  app.use(pageHeaders({ scripts: false }), async (c, next) => {
    await next();
    // The pages carry CSRF secrets and codes travel in redirects: nothing is kept by any cache.
    c.header("cache-control", "no-store");
  });

  const page = (
    c: Context,
    status: 200 | 400 | 401 | 403 | 404 | 429 | 502 | 503,
    body: ReturnType<typeof messagePage>,
  ) => c.html(body, status);
  const noFlow = (c: Context<GatewayEnv>) => {
    refused(c, "no_flow");
    return page(
      c,
      400,
      messagePage(
        "Sign-in expired",
        `No sign-in is in progress in this browser (they last 10 minutes). ${START_AGAIN}`,
      ),
    );
  };

  /** Opens a flow and gives this browser its cookie, ending the one it had. */
  const begin = async (c: Context<GatewayEnv>, request: Parameters<typeof openFlow>[1]) => {
    const previous = await readFlow(ctl, getCookie(c, COOKIE));
    if (previous) await closeFlow(ctl, previous);
    const opened = await openFlow(ctl, request);
    if (!opened) return undefined;
    setCookie(c, COOKIE, opened.secret, {
      httpOnly: true,
      sameSite: "Lax",
      path: "/auth",
      maxAge: FLOW_TTL_MS / 1000,
      secure: baseUrlOf(c, publicUrl).startsWith("https:"),
    });
    return opened.flow;
  };
  /** Counts a sign-in opened by this request's client address; false past its share (per-client.ts). */
  const fromHere = async (c: Context<GatewayEnv>) => {
    const verdict = await allowOpenFrom(ctl, requestAddress(c, proxyHops), opensPerMinute);
    // Once per address and minute: a flood does not flood the log.
    if (verdict === "refused-first") refused(c, "too_many_from_client");
    return verdict === "allowed";
  };
  const tooManyHere = (c: Context<GatewayEnv>) => {
    c.header("retry-after", "60");
    return page(
      c,
      429,
      messagePage("Try again soon", "Too many sign-ins were started from here; try again in a minute."),
    );
  };
  const tooMany = (c: Context<GatewayEnv>) => {
    refused(c, "too_many_open");
    return page(c, 503, messagePage("Try again soon", "Too many sign-ins are in progress; try again in a minute."));
  };

  /** A posted form of this browser's flow, its CSRF secret checked; otherwise the page to answer. */
  const posted = async (c: Context<GatewayEnv>): Promise<{ flow: Flow; form: Record<string, string> } | Response> => {
    const form = (await formFields(c)) ?? {};
    const flow = await readFlow(ctl, getCookie(c, COOKIE));
    if (!flow) return noFlow(c);
    if (!csrfMatches(flow, form.csrf)) {
      refused(c, "csrf_mismatch");
      return page(
        c,
        403,
        messagePage("Sign-in refused", `This form does not belong to this browser's sign-in. ${START_AGAIN}`),
      );
    }
    return { flow, form };
  };
  const end = async (c: Context, flow: Flow) => {
    await closeFlow(ctl, flow);
    deleteCookie(c, COOKIE, { path: "/auth" });
  };

  app.get("/authorize", async (c) => {
    const q = c.req.query();
    const redirect = q.redirect_uri === undefined ? undefined : loopbackRedirect(q.redirect_uri);
    // RFC 6749 §4.1.2.1: a request whose client or redirect URI is wrong is never redirected anywhere.
    if (q.client_id !== CLI_CLIENT_ID || !redirect) {
      refused(
        c,
        q.client_id !== CLI_CLIENT_ID ? "unknown_client" : "redirect_uri_not_loopback",
        "authorization request",
      );
      return page(c, 400, messagePage("Sign-in refused", `This sign-in request is not valid. ${START_AGAIN}`));
    }
    const problem =
      q.response_type !== "code"
        ? "unsupported_response_type"
        : !q.state || q.state.length > 500
          ? "state_missing"
          : q.code_challenge_method !== "S256"
            ? "pkce_not_s256"
            : !q.code_challenge || !PKCE_PATTERN.test(q.code_challenge)
              ? "pkce_challenge_missing"
              : undefined;
    if (problem) {
      refused(c, problem, "authorization request");
      const back = new URL(redirect);
      back.searchParams.set("error", problem === "unsupported_response_type" ? problem : "invalid_request");
      back.searchParams.set("error_description", problem);
      if (q.state) back.searchParams.set("state", q.state);
      return c.redirect(back.href, 303);
    }
    if (!(await fromHere(c))) return tooManyHere(c);
    const flow = await begin(c, {
      kind: "code",
      redirect_uri: redirect.href,
      state: q.state as string,
      code_challenge: q.code_challenge as string,
    });
    return flow ? c.redirect("/auth/signin", 303) : tooMany(c);
  });

  // A page view allocates nothing: the form's CSRF secret is a cookie of its own (double submit),
  // kept by the browser alone; a flow is opened only for a user code that names a device waiting.
  app.get("/device", async (c) => {
    const csrf = getCookie(c, DEVICE_COOKIE)?.slice(0, 100) || randomSecret();
    setCookie(c, DEVICE_COOKIE, csrf, {
      httpOnly: true,
      sameSite: "Lax",
      path: "/auth/device",
      maxAge: FLOW_TTL_MS / 1000,
      secure: baseUrlOf(c, publicUrl).startsWith("https:"),
    });
    return page(c, 200, devicePage({ csrf, userCode: c.req.query("user_code")?.slice(0, 20) }));
  });

  app.post("/device", async (c) => {
    const form = (await formFields(c)) ?? {};
    const csrf = getCookie(c, DEVICE_COOKIE);
    if (!csrf || !form.csrf || !sameSecret(csrf, form.csrf)) {
      refused(c, "csrf_mismatch");
      return page(
        c,
        403,
        messagePage("Sign-in refused", `This form was not sent from this browser's page. ${START_AGAIN}`),
      );
    }
    // Every code entered counts against the client address: guessing is bounded as opening is.
    if (!(await fromHere(c))) return tooManyHere(c);
    const device = await findDevice(ctl, form.user_code ?? "");
    if (!device) {
      refused(c, "wrong_user_code");
      return page(
        c,
        400,
        devicePage({ csrf, userCode: form.user_code, error: "That code is not valid, or it has expired." }),
      );
    }
    const flow = await begin(c, { kind: "device", device: device.id, user_code: device.userCode });
    if (!flow) return tooMany(c);
    deleteCookie(c, DEVICE_COOKIE, { path: "/auth/device" });
    return c.redirect("/auth/signin", 303);
  });

  const signInForm = async (c: Context<GatewayEnv>, flow: Flow, status: 200 | 401, error?: string) => {
    if (oidc) allowFormTarget(c, await oidc.authorizationOrigin());
    return page(
      c,
      status,
      signInPage({ csrf: flow.csrf, requester: requesterOf(flow), provider: oidc?.settings.name, error }),
    );
  };

  app.get("/signin", async (c) => {
    const flow = await readFlow(ctl, getCookie(c, COOKIE));
    if (!flow) return noFlow(c);
    if (!ready(flow)) return c.redirect("/auth/device", 303);
    if (flow.subject_id) return c.redirect("/auth/consent", 303);
    return signInForm(c, flow, 200);
  });

  app.post("/signin", async (c) => {
    const got = await posted(c);
    if (got instanceof Response) return got;
    const { flow, form } = got;
    if (!ready(flow)) return c.redirect("/auth/device", 303);
    const typed = form.api_key?.trim() ?? "";
    const key = typed && typed.length <= 200 ? await verifyApiKey(ctl, typed) : undefined;
    if (!key) {
      refused(c, "wrong_api_key");
      if (!(await countAttempt(ctl, flow)))
        return page(c, 429, messagePage("Too many attempts", `That was the last try for this sign-in. ${START_AGAIN}`));
      return signInForm(c, flow, 401, "That API key is not valid.");
    }
    await updateFlow(ctl, flow, {
      subject_kind: "key",
      subject_id: key.id,
      name: key.name,
      org: key.org,
      role: key.role,
    });
    return c.redirect("/auth/consent", 303);
  });

  app.post("/oidc/start", async (c) => {
    if (!oidc) return page(c, 404, messagePage("Not here", "This platform has no identity provider configured."));
    const got = await posted(c);
    if (got instanceof Response) return got;
    const { flow } = got;
    if (!ready(flow)) return c.redirect("/auth/device", 303);
    if (!(await countAttempt(ctl, flow))) {
      refused(c, "too_many_provider_round_trips");
      return page(c, 429, messagePage("Too many attempts", `That was the last try for this sign-in. ${START_AGAIN}`));
    }
    try {
      const { url, checks } = await oidc.start(`${baseUrlOf(c, publicUrl)}/auth/oidc/callback`);
      await updateFlow(ctl, flow, {
        oidc_state: checks.state,
        oidc_nonce: checks.nonce,
        oidc_verifier: checks.verifier,
      });
      return c.redirect(url, 303);
    } catch (e) {
      log.error({ request_id: c.get("requestId"), err: e }, "the identity provider cannot be reached");
      return page(
        c,
        502,
        messagePage(
          "Identity provider unavailable",
          `${oidc.settings.name} cannot be reached right now. Try again in a moment, or sign in with an API key.`,
        ),
      );
    }
  });

  app.get("/oidc/callback", async (c) => {
    const flow = await readFlow(ctl, getCookie(c, COOKIE));
    if (!oidc || !flow) return noFlow(c);
    const { oidc_state: state, oidc_nonce: nonce, oidc_verifier: verifier } = flow;
    if (!state || !nonce || !verifier) {
      refused(c, "no_provider_round_trip");
      return page(c, 400, messagePage("Sign-in refused", `This browser did not start a sign-in there. ${START_AGAIN}`));
    }
    // One answer per round trip: a replayed or second callback finds nothing to check against.
    await updateFlow(ctl, flow, { oidc_state: undefined, oidc_nonce: undefined, oidc_verifier: undefined });
    let claims: Record<string, unknown>;
    try {
      const callback = new URL(`${baseUrlOf(c, publicUrl)}/auth/oidc/callback${new URL(c.req.url).search}`);
      claims = await oidc.finish(callback, { state, nonce, verifier });
    } catch (e) {
      const code = (e as { error?: string; code?: string }).error ?? (e as { code?: string }).code ?? "error";
      log.warn(
        { request_id: c.get("requestId"), reason: `provider_${code}`, err: e },
        `sign-in refused: provider_${code}`,
      );
      await end(c, flow);
      return page(
        c,
        400,
        messagePage("Sign-in failed", `Signing in with ${oidc.settings.name} did not complete. ${START_AGAIN}`),
      );
    }
    const placement = placementOf(claims, oidc.settings.claims);
    const org = placement.ok ? await findOrg(ctl, placement.org) : undefined;
    if (!placement.ok || !org) {
      const message = placement.ok
        ? `Your identity provider puts you in the organization "${placement.org}", which does not exist on this platform. An operator creates it with platform orgs create ${placement.org}.`
        : placement.message;
      const reason = placement.ok ? "org_not_found" : "claims_refused";
      log.warn(
        { request_id: c.get("requestId"), reason, detail: message },
        `sign-in refused: ${reason} (${String(claims.sub)} of ${String(claims.iss)})`,
      );
      await end(c, flow);
      return page(c, 403, messagePage("Sign-in refused", message));
    }
    const user = await upsertUser(ctl, {
      issuer: String(claims.iss),
      subject: String(claims.sub),
      name: placement.name.slice(0, 200),
      org: placement.org,
      role: placement.role,
    });
    await updateFlow(ctl, flow, {
      subject_kind: "user",
      subject_id: user.id,
      name: user.name,
      org: user.org,
      role: user.role,
    });
    return c.redirect("/auth/consent", 303);
  });

  app.get("/consent", async (c) => {
    const flow = await readFlow(ctl, getCookie(c, COOKIE));
    if (!flow) return noFlow(c);
    if (!ready(flow) || !flow.subject_id) return c.redirect("/auth/signin", 303);
    const requester = requesterOf(flow);
    if (requester.kind === "loopback") allowFormTarget(c, requester.origin);
    return page(
      c,
      200,
      consentPage({
        csrf: flow.csrf,
        requester,
        name: flow.name ?? "",
        org: flow.org ?? "",
        role: flow.role ?? "",
        lifetime: describeLifetime(lifetimes.ttlMs),
        session: describeLifetime(lifetimes.refreshTtlMs),
      }),
    );
  });

  app.post("/consent", async (c) => {
    const got = await posted(c);
    if (got instanceof Response) return got;
    const { flow, form } = got;
    if (!ready(flow) || !flow.subject_kind || !flow.subject_id) return c.redirect("/auth/signin", 303);
    const subject = { kind: flow.subject_kind, id: flow.subject_id };
    const allow = form.decision === "allow";
    // Consent is given once: the flow ends here whatever the answer.
    await end(c, flow);
    log.info(
      { request_id: c.get("requestId") },
      `sign-in of ${subject.kind} ${subject.id} (${flow.org}) ${allow ? "approved" : "denied"} for the ${flow.kind === "code" ? "CLI's loopback redirect" : "device code"}`,
    );
    if (flow.kind === "code") {
      const back = new URL(flow.redirect_uri as string);
      if (allow)
        back.searchParams.set(
          "code",
          await issueCode(ctl, {
            redirect_uri: flow.redirect_uri as string,
            code_challenge: flow.code_challenge as string,
            subject,
          }),
        );
      else back.searchParams.set("error", "access_denied");
      back.searchParams.set("state", flow.state as string);
      return c.redirect(back.href, 303);
    }
    if (!(await decideDevice(ctl, flow.device as string, allow ? { subject } : "denied"))) {
      refused(c, "device_code_not_pending");
      return page(c, 400, messagePage("Code expired", `This code expired or was already used. ${START_AGAIN}`));
    }
    return page(
      c,
      200,
      allow
        ? messagePage(
            "Signed in",
            "Done: the CLI on your device gets its token in a few seconds. You can close this page.",
          )
        : messagePage("Denied", "The CLI on your device gets no token. You can close this page."),
    );
  });

  return app;
}
