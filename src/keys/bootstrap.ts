/**
 * The first admin key: the operator's (PLATFORM_BOOTSTRAP_ADMIN_KEY, a Secret), registered by its
 * hash at every start of a long-running process (`gateway`, `up`) and by `platform keys bootstrap`;
 * or, for `up` without one, a key the CLI kept or a new one.
 * Refusals are PlatformErrors: 400 for a key that is bad input, others for a failed operation.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { PlatformError } from "../contracts/errors.ts";
import { isOperator } from "../contracts/orgs.ts";
import type { Control } from "../redis/connection.ts";
import {
  BOOTSTRAP_KEY_NAME,
  type BootstrapOutcome,
  bootstrapAdminKey,
  countApiKeys,
  createApiKey,
  verifyApiKey,
  weakKeyReason,
} from "./store.ts";

/** How long a start waits for Redis: a cluster may start the gateway before Redis answers. */
const REDIS_WAIT_MS = 60_000;

export function describeBootstrap(done: BootstrapOutcome): string {
  return done.outcome === "created"
    ? `bootstrap admin key registered as ${done.record.id}; Redis holds only its SHA-256, the key itself stays in your Secret`
    : `bootstrap admin key already registered (${done.record.id}); nothing changed`;
}

/**
 * The bootstrap a long-running process runs at every start (idempotent, so a cluster needs no
 * separate first-run step). A weak key stops it. A different key already registered is logged and
 * the process serves on: a changed Secret must not take the platform down (compose would restart
 * it forever), and the admin key registered before still works. Resolves whether this key is the
 * registered one.
 */
export async function bootstrapAtStart(ctl: Control, key: string, where: string): Promise<boolean> {
  const weak = weakKeyReason(key);
  if (weak) throw new PlatformError(400, "weak_key", `PLATFORM_BOOTSTRAP_ADMIN_KEY is too weak: ${weak}`, "key");
  try {
    console.log(describeBootstrap(await runBootstrap(ctl, key, where)));
    return true;
  } catch (e) {
    if (!(e instanceof PlatformError) || e.status === 400) throw e;
    console.error(`bootstrap: ${e.message}`);
    return false;
  }
}

/** Registers the bootstrap key, waiting a bounded time for Redis (`where` names it in the error). */
export async function runBootstrap(ctl: Control, key: string, where: string): Promise<BootstrapOutcome> {
  const deadline = Date.now() + REDIS_WAIT_MS;
  for (;;) {
    const ok = await Promise.race([
      ctl.redis.ping().then(
        () => true,
        () => false,
      ),
      new Promise<boolean>((r) => setTimeout(() => r(false), 5_000).unref()),
    ]);
    if (ok) break;
    if (Date.now() > deadline)
      throw new PlatformError(
        503,
        "redis_unavailable",
        `cannot reach Redis at ${where} (REDIS_URL); is it running, and is the password right?`,
      );
    await sleep(1_000);
  }
  return bootstrapAdminKey(ctl, key);
}

/**
 * `platform up`'s admin key on one machine, where no operator supplies one: the first of `saved`
 * (keys the CLI kept) that is an operator's here, else a newly minted operator key (an admin of
 * the install's own organization), named as the bootstrap key when it is the first key of all.
 */
export async function operatorKey(ctl: Control, saved: string[]): Promise<{ key: string; minted: boolean }> {
  for (const key of saved) {
    const record = await verifyApiKey(ctl, key);
    if (record && isOperator(record)) return { key, minted: false };
  }
  const first = (await countApiKeys(ctl)) === 0;
  const name = first ? BOOTSTRAP_KEY_NAME : `admin-${new Date().toISOString().slice(0, 10)}`;
  const { key } = await createApiKey(ctl, name, "admin");
  return { key, minted: true };
}
