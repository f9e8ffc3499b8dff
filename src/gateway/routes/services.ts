/**
 * The dev center's API under /admin/v1/services (docs/services.md, "HTTP API"): deploy, roll out,
 * status, history, logs, variables and secrets of the caller's organization's services. Any key or
 * token of the organization may use it, as publishing; another organization's service is a 404.
 * Secret values go in and never come out.
 */
import { Hono } from "hono";
import { stream } from "hono/streaming";
import { z } from "zod";
import { PlatformError } from "../../contracts/errors.ts";
import { DURATION_ERROR, parseDuration } from "../../contracts/duration.ts";
import { ImageRepository, ImageTag } from "../../container-images/names.ts";
import { checkRegistryHost, registryHostOf } from "../../container-images/registries.ts";
import type { ProtoCatalog } from "../../protos/store.ts";
import { type Control, duplicate } from "../../redis/connection.ts";
import { followLogs, readLogs } from "../../services/logs.ts";
import {
  EnvName,
  EnvValue,
  MAX_ENV_ENTRIES,
  MAX_OVERVIEW_BYTES,
  RepoType,
  ServiceName,
  StoredEnvName,
} from "../../services/names.ts";
import type { ServiceRecord } from "../../services/record.ts";
import { readReplicas } from "../../services/replicas.ts";
import { deployService, startRollout } from "../../services/rollouts.ts";
import type { SecretBox } from "../../services/secrets.ts";
import type { RegistryPolicy } from "../../settings/registries.ts";
import { deleteService, getService, listRollouts, listServices, updateService } from "../../services/store.ts";
import { listVariables, setVariables, unsetVariable, type VariableKind } from "../../services/variables.ts";
import type { GatewayEnv } from "../env.ts";
import { parseBody, pathParam } from "../errors.ts";

export type ServiceRoutesOptions = {
  ctl: Control;
  protos: ProtoCatalog;
  box: () => Promise<SecretBox>;
  rolloutDeadlineMs: number;
  baseUrl: () => string;
  /** Which registries a deploy may name (PLATFORM_IMAGE_REGISTRIES). */
  registries: RegistryPolicy;
  /** Open `logs?follow=true` streams one organization may hold on this gateway (PLATFORM_ORG_LOG_FOLLOWS). */
  maxFollowsPerOrg?: number;
};

const Values = z
  .record(z.string(), EnvValue, { message: 'expected an object of NAME: "value" pairs' })
  .superRefine((values, ctx) => {
    const names = Object.keys(values);
    if (names.length > MAX_ENV_ENTRIES)
      ctx.addIssue({ code: "custom", message: `expected at most ${MAX_ENV_ENTRIES} entries` });
    for (const name of names) {
      const checked = EnvName.safeParse(name);
      if (!checked.success)
        ctx.addIssue({ code: "custom", path: [name], message: checked.error.issues[0]?.message ?? "bad name" });
    }
  });

const DeployBody = z
  .object({
    name: ServiceName,
    tag: ImageTag,
    repo_type: RepoType,
    image_repository: ImageRepository,
    replicas: z.number().int().min(1, "expected 1 to 20").max(20, "expected 1 to 20").default(1),
    port: z
      .number()
      .int()
      .min(1, "expected a port from 1 to 65535")
      .max(65535, "expected a port from 1 to 65535")
      .default(8080),
    env: Values.default({}),
  })
  .strict();

const RolloutBody = z.union(
  [
    z.object({ tag: ImageTag }).strict(),
    z.object({ restart: z.literal(true) }).strict(),
    z.object({ undo: z.literal(true) }).strict(),
  ],
  { message: 'expected {"tag": "<tag>"}, {"restart": true} or {"undo": true}' },
);

const OverviewBody = z
  .object({
    markdown: z
      .string()
      .refine(
        (v) => Buffer.byteLength(v) <= MAX_OVERVIEW_BYTES,
        `expected at most ${MAX_OVERVIEW_BYTES} bytes of Markdown`,
      ),
  })
  .strict();

const VariablesBody = z.object({ values: Values }).strict();

const ReplicasBody = z
  .object({
    replicas: z
      .number({ message: "expected a whole number from 1 to 20" })
      .int("expected a whole number from 1 to 20")
      .min(1, "expected 1 to 20")
      .max(20, "expected 1 to 20"),
  })
  .strict();

/** Open `logs?follow=true` streams per gateway: each holds a Redis connection. Per organization: PLATFORM_ORG_LOG_FOLLOWS. */
const MAX_FOLLOWERS = 100;
const MAX_TAIL = 5000;

export function serviceRoutes(options: ServiceRoutesOptions) {
  const { ctl } = options;
  const app = new Hono<GatewayEnv>();
  const rc = async () => ({
    ctl,
    protos: options.protos,
    box: await options.box(),
    deadlineMs: options.rolloutDeadlineMs,
  });
  const who = (c: { get: (k: "caller") => { id: string; name: string; org: string } }) => {
    const caller = c.get("caller");
    return { id: caller.id, name: caller.name };
  };
  let followers = 0;
  // Per organization too, so that one organization cannot take every follower this gateway has.
  const followersOf = new Map<string, number>();
  const maxPerOrg = options.maxFollowsPerOrg ?? 8;

  /** The record as the API shows it: the gateway's base for Connect clients, and each RPC service's URL. */
  const view = (record: ServiceRecord) => ({
    ...record,
    url: `${options.baseUrl()}/rpc`,
    urls: record.rpc_services.map((s) => `${options.baseUrl()}/rpc/${s}`),
  });

  app.post("/", async (c) => {
    const body = await parseBody(c, DeployBody);
    checkRegistryHost(registryHostOf(body.image_repository), options.registries, "image_repository");
    const record = await deployService(await rc(), c.get("caller").org, who(c), body);
    return c.json(view(record), 201);
  });

  app.get("/", async (c) => {
    const org = c.get("caller").org;
    const services = await listServices(ctl, org);
    return c.json({
      data: await Promise.all(
        services.map(async (s) => ({
          ...view(s),
          replica_states: (await readReplicas(ctl, org, s.name)).map((r) => r.state),
        })),
      ),
    });
  });

  app.get("/:name", async (c) => {
    const org = c.get("caller").org;
    const name = pathParam(c, "name", ServiceName);
    const record = await getService(ctl, org, name);
    const [replicas, rollouts, env, secrets] = await Promise.all([
      readReplicas(ctl, org, name),
      listRollouts(ctl, org, name, 10),
      listVariables(ctl, "env", org, name),
      listVariables(ctl, "secrets", org, name),
    ]);
    // `replicas` is the list here, the wanted count `desired_replicas` (as in status).
    return c.json({ ...view(record), desired_replicas: record.replicas, replicas, rollouts, env, secrets });
  });

  app.delete("/:name", async (c) => {
    await deleteService(ctl, c.get("caller").org, pathParam(c, "name", ServiceName));
    return c.json({ deleted: true });
  });

  app.put("/:name/overview", async (c) => {
    const name = pathParam(c, "name", ServiceName);
    const { markdown } = await parseBody(c, OverviewBody);
    return c.json(view(await updateService(ctl, c.get("caller").org, name, (r) => ({ ...r, overview: markdown }))));
  });

  // Scaling is not a rollout: the serving release gets more or fewer replicas, at once.
  app.put("/:name/replicas", async (c) => {
    const name = pathParam(c, "name", ServiceName);
    const { replicas } = await parseBody(c, ReplicasBody);
    return c.json(view(await updateService(ctl, c.get("caller").org, name, (r) => ({ ...r, replicas }))));
  });

  app.post("/:name/rollouts", async (c) => {
    const name = pathParam(c, "name", ServiceName);
    const body = await parseBody(c, RolloutBody);
    const record = await startRollout(await rc(), c.get("caller").org, name, who(c), body);
    return c.json(record.rollout, 202);
  });

  app.get("/:name/rollouts", async (c) => {
    const org = c.get("caller").org;
    const name = pathParam(c, "name", ServiceName);
    await getService(ctl, org, name);
    return c.json({ data: await listRollouts(ctl, org, name) });
  });

  app.get("/:name/status", async (c) => {
    const org = c.get("caller").org;
    const name = pathParam(c, "name", ServiceName);
    const record = await getService(ctl, org, name);
    const replicas = await readReplicas(ctl, org, name);
    return c.json({
      name,
      phase: record.rollout.phase,
      ...(record.rollout.reason ? { reason: record.rollout.reason } : {}),
      rollout: record.rollout,
      current: record.current,
      desired_replicas: record.replicas,
      replicas: replicas.map((r) => ({ ...r, ready: r.state === "ready" })),
    });
  });

  app.get("/:name/logs", async (c) => {
    const org = c.get("caller").org;
    const name = pathParam(c, "name", ServiceName);
    await getService(ctl, org, name);
    const q = c.req.query();
    const tail = q.tail === undefined ? 100 : Number(q.tail);
    if (!Number.isInteger(tail) || tail < 0 || tail > MAX_TAIL)
      throw new PlatformError(400, "invalid_request", `tail: expected a whole number from 0 to ${MAX_TAIL}`, "tail");
    let sinceMs: number | undefined;
    if (q.since !== undefined) {
      sinceMs =
        parseDuration(q.since) ?? (/^\d+h$/.test(q.since) ? Number.parseInt(q.since, 10) * 3_600_000 : undefined);
      if (sinceMs === undefined)
        throw new PlatformError(400, "invalid_request", `since: ${DURATION_ERROR.replace("m)", "m, <n>h)")}`, "since");
    }
    const replica = q.replica || undefined;
    const follow = q.follow === "true" || q.follow === "1";
    const first = await readLogs(ctl, org, name, { tail, sinceMs, replica });
    c.header("content-type", "application/x-ndjson");
    if (!follow) return c.body(first.lines.map((l) => `${JSON.stringify(l)}\n`).join(""));
    if (followers >= MAX_FOLLOWERS)
      throw new PlatformError(
        429,
        "too_many_followers",
        "too many logs are followed on this gateway; try again later",
        null,
        5,
      );
    const mine = followersOf.get(org) ?? 0;
    if (mine >= maxPerOrg)
      throw new PlatformError(
        429,
        "too_many_followers",
        `organization ${org} already follows ${mine} logs on this gateway, its most (PLATFORM_ORG_LOG_FOLLOWS); close one and retry`,
        null,
        5,
      );
    followers++;
    followersOf.set(org, mine + 1);
    return stream(c, async (out) => {
      const reader = duplicate(ctl);
      let open = true;
      out.onAbort(() => {
        open = false;
      });
      try {
        for (const l of first.lines) await out.write(`${JSON.stringify(l)}\n`);
        let cursor = first.cursor;
        while (open) {
          // A service deleted meanwhile ends the stream.
          if (!(await ctl.redis.hexists(ctl.keys.services, `${org}/${name}`))) break;
          const next = await followLogs(reader, ctl, org, name, cursor, 1000, replica);
          cursor = next.cursor;
          for (const l of next.lines) await out.write(`${JSON.stringify(l)}\n`);
        }
      } finally {
        followers--;
        const left = (followersOf.get(org) ?? 1) - 1;
        if (left > 0) followersOf.set(org, left);
        else followersOf.delete(org);
        reader.disconnect();
      }
    });
  });

  for (const kind of ["env", "secrets"] as VariableKind[]) {
    app.get(`/:name/${kind}`, async (c) => {
      const org = c.get("caller").org;
      const name = pathParam(c, "name", ServiceName);
      await getService(ctl, org, name);
      return c.json({ data: await listVariables(ctl, kind, org, name) });
    });
    app.put(`/:name/${kind}`, async (c) => {
      const org = c.get("caller").org;
      const name = pathParam(c, "name", ServiceName);
      const { values } = await parseBody(c, VariablesBody);
      await getService(ctl, org, name);
      return c.json({ data: await setVariables(ctl, await options.box(), kind, org, name, values, who(c)) });
    });
    app.delete(`/:name/${kind}/:key`, async (c) => {
      const org = c.get("caller").org;
      const name = pathParam(c, "name", ServiceName);
      const key = pathParam(c, "key", StoredEnvName);
      await getService(ctl, org, name);
      await unsetVariable(ctl, kind, org, name, key);
      return c.json({ deleted: true });
    });
  }

  return app;
}
