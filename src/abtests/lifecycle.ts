/**
 * The scaler's part in A/B tests (src/abtests/record.ts), on every tick of
 * the scaler that holds the lease:
 * - a `starting` test starts splitting once every version in its split has a
 *   ready replica (until then the endpoint's own version takes all traffic);
 * - a `stopping` test is finished once the versions it no longer routes to
 *   have nothing queued or running: the kept version becomes the endpoint's
 *   own (if it was a variant) and the other variants retire;
 * - a retiring variant is removed once its queue is empty, or once another
 *   deployment of the same version is ready to take what is left in it.
 * Nothing is removed while a request may still need it, so neither a weight
 * change nor a stop loses a request in flight.
 */
import { type AbTest, variantName } from "./record.ts";
import type { Endpoint } from "../endpoints/record.ts";
import { deleteAbTest, readAbTests, saveAbTest } from "./store.ts";
import { clearAutoscaling } from "../autoscaling/store.ts";
import { deleteEndpoint, listEndpoints, saveEndpoint } from "../endpoints/store.ts";
import { listReplicas } from "../replicas/heartbeats.ts";
import { servesTraffic, servingQueue } from "../endpoints/rollout.ts";
import { readQueueDepth } from "../endpoints/status.ts";
import type { QueueBase } from "../queue/base.ts";
import { endpointQueueName } from "../contracts/engines.ts";
import type { DeploymentConfig } from "../contracts/deployment.ts";

export async function advanceAbTests(queues: QueueBase, log: (line: string) => void): Promise<void> {
  const ctl = queues.ctl;
  const tests = await readAbTests(ctl);
  let endpoints = await listEndpoints(ctl);
  const byName = () => new Map(endpoints.map((e) => [e.name, e]));
  const ready = async (e: Endpoint | undefined) =>
    e !== undefined && (await listReplicas(ctl, e.name)).some((r) => r.state === "ready" && servesTraffic(r, e));
  // A test's versions run with the endpoint's settings, so with its queue variant.
  const drained = async (config: DeploymentConfig, version: string) => {
    const depth = await readQueueDepth(queues.queueNamed(endpointQueueName({ config, version })));
    return depth.waiting + depth.active === 0;
  };

  for (const test of tests.values()) {
    const primary = byName().get(test.endpoint);
    if (!primary) {
      await deleteAbTest(ctl, test.endpoint); // the endpoint is gone
      continue;
    }
    const deploymentOf = (version: string) =>
      version === primary.version ? primary : byName().get(variantName(test.endpoint, version));
    if (test.state === "starting") {
      const waitingFor = [];
      for (const v of test.split)
        if (v.weight > 0 && !(await ready(deploymentOf(v.version)))) waitingFor.push(v.version);
      if (waitingFor.length === 0) {
        await saveAbTest(ctl, { ...test, state: "running", serving: undefined, updated: Date.now() });
        log(`[abtest] ${test.endpoint}: every version ready, splitting traffic`);
      }
    } else if (test.state === "stopping") {
      endpoints = await finishStop(queues, test, primary, endpoints, drained, log);
    }
  }

  for (const variant of endpoints.filter((e) => e.retiring)) {
    const servedElsewhere = await (async () => {
      for (const e of endpoints)
        if (e !== variant && !e.retiring && servingQueue(e) === servingQueue(variant) && (await ready(e))) return true;
      return false;
    })();
    if (servedElsewhere || (await drained(variant.config, variant.version))) {
      await deleteEndpoint(ctl, variant.name);
      await clearAutoscaling(ctl, variant.name);
      log(`[abtest] ${variant.name}: retired (${variant.variant_of} no longer routes to ${variant.version})`);
    }
  }
}

/** The stop's second half, once no request is left on the versions the test stopped routing to. */
async function finishStop(
  queues: QueueBase,
  test: AbTest,
  primary: Endpoint,
  endpoints: Endpoint[],
  drained: (config: DeploymentConfig, version: string) => Promise<boolean>,
  log: (line: string) => void,
): Promise<Endpoint[]> {
  const ctl = queues.ctl;
  const keep = test.keep ?? primary.version;
  const others = new Set([primary.version, ...test.split.map((v) => v.version)].filter((v) => v !== keep));
  for (const version of others) if (!(await drained(primary.config, version))) return endpoints;
  const variants = endpoints.filter((e) => e.variant_of === test.endpoint);
  const now = Date.now();
  if (keep !== primary.version) {
    // The kept variant's settings become the endpoint's; its own deployment retires once the
    // endpoint's new replicas are ready, so the version is served throughout.
    const kept = variants.find((v) => v.version === keep);
    if (kept) {
      await saveEndpoint(ctl, {
        ...primary,
        config: { ...primary.config, model: { ...primary.config.model, version: keep } },
        version: keep,
        updated: now,
      });
    }
  }
  for (const v of variants) if (!v.retiring) await saveEndpoint(ctl, { ...v, retiring: true, updated: now });
  await deleteAbTest(ctl, test.endpoint);
  await ctl.redis.del(ctl.keys.abStats(test.endpoint));
  log(`[abtest] ${test.endpoint}: test stopped, all traffic on ${keep}`);
  return listEndpoints(ctl);
}
