/**
 * A browser's sign-in in progress (docs/signin.md): what the CLI asked for (a loopback redirect
 * with its state and PKCE challenge, or a device code to approve), who signed in, and the
 * provider's state while an OpenID Connect round trip is out. The browser holds only the flow's
 * secret, in an HttpOnly SameSite=Lax cookie; Redis keeps the flow under that secret's SHA-256 for
 * 10 minutes at most, with the per-flow CSRF secret the pages' forms carry back.
 */
import { z } from "zod";
import { Role } from "../contracts/orgs.ts";
import { hashSecret } from "../keys/store.ts";
import type { Control } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";
import { randomSecret, sameSecret } from "./oauth.ts";
import { admitOpen, releaseOpen } from "./open.ts";

const changeScript = new LuaScript(import.meta.url, "change");

export const FLOW_TTL_MS = 10 * 60_000;
/** Wrong API keys, wrong user codes and provider round trips one flow may try before it is closed. */
export const MAX_ATTEMPTS = 5;

const Flow = z.object({
  id: z.string(),
  kind: z.enum(["code", "device"]),
  csrf: z.string(),
  expires: z.coerce.number(),
  attempts: z.coerce.number().default(0),
  /** A loopback flow: where the code goes, the CLI's state and PKCE challenge. */
  redirect_uri: z.string().optional(),
  state: z.string().optional(),
  code_challenge: z.string().optional(),
  /** A device flow, once its user code was entered: the device code's SHA-256 and the code as shown. */
  device: z.string().optional(),
  user_code: z.string().optional(),
  /** Who signed in (an API key or a provider's user), and as what, for the consent page. */
  subject_kind: z.enum(["key", "user"]).optional(),
  subject_id: z.string().optional(),
  name: z.string().optional(),
  org: z.string().optional(),
  role: Role.optional(),
  /** An OpenID Connect round trip under way: its state, nonce and PKCE verifier. */
  oidc_state: z.string().optional(),
  oidc_nonce: z.string().optional(),
  oidc_verifier: z.string().optional(),
});
export type Flow = z.infer<typeof Flow>;

export type FlowRequest =
  | { kind: "code"; redirect_uri: string; state: string; code_challenge: string }
  | { kind: "device"; device?: string; user_code?: string };

type FlowFields = Partial<Omit<Flow, "id" | "kind" | "csrf" | "expires">>;

const member = (id: string) => `flow:${id}`;

/** A new flow; resolves its cookie secret, or undefined when too many sign-ins are open (open.ts). */
export async function openFlow(
  ctl: Control,
  request: FlowRequest,
  now = Date.now(),
): Promise<{ secret: string; flow: Flow } | undefined> {
  const secret = randomSecret();
  const flow: Flow = {
    id: hashSecret(secret),
    csrf: randomSecret(),
    expires: now + FLOW_TTL_MS,
    attempts: 0,
    ...request,
  };
  if (!(await admitOpen(ctl, member(flow.id), flow.expires, now))) return undefined;
  const key = ctl.keys.signinFlow(flow.id);
  await ctl.redis.multi().hset(key, fieldsOf(flow)).pexpireat(key, flow.expires).exec();
  return { secret, flow };
}

/** The flow a cookie names, while it lasts. */
export async function readFlow(ctl: Control, secret: string | undefined, now = Date.now()): Promise<Flow | undefined> {
  if (!secret || secret.length > 100) return undefined;
  const id = hashSecret(secret);
  const stored = await ctl.redis.hgetall(ctl.keys.signinFlow(id));
  const parsed = Flow.safeParse({ ...stored, id });
  return parsed.success && parsed.data.expires > now ? parsed.data : undefined;
}

/** Whether a form's CSRF field is this flow's secret. */
export function csrfMatches(flow: Flow, presented: unknown): boolean {
  return typeof presented === "string" && sameSecret(presented, flow.csrf);
}

/** Sets fields of a live flow (a flow that ended meanwhile is not brought back); `undefined` clears one. */
export async function updateFlow(ctl: Control, flow: Flow, fields: FlowFields): Promise<void> {
  const set = Object.entries(fieldsOf(fields)).flat();
  const cleared = Object.entries(fields).flatMap(([k, v]) => (v === undefined ? [k] : []));
  await changeScript.run(ctl.redis, [ctl.keys.signinFlow(flow.id)], ["", set.length / 2, ...set, ...cleared]);
  Object.assign(flow, fields);
}

/** Counts a failed attempt; false once the flow has used them all (it is then closed) or has ended. */
export async function countAttempt(ctl: Control, flow: Flow): Promise<boolean> {
  const attempts = Number(await changeScript.run(ctl.redis, [ctl.keys.signinFlow(flow.id)], ["attempts", 0]));
  if (attempts > 0 && attempts < MAX_ATTEMPTS) return true;
  await closeFlow(ctl, flow);
  return false;
}

/** Ends a flow: signed in and consented, denied, or given up. */
export async function closeFlow(ctl: Control, flow: Flow): Promise<void> {
  await ctl.redis.del(ctl.keys.signinFlow(flow.id));
  await releaseOpen(ctl, member(flow.id));
}

function fieldsOf(fields: Partial<Flow>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(fields).flatMap(([k, v]) => (v === undefined || k === "id" ? [] : [[k, String(v)]])),
  );
}
