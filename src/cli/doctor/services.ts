/**
 * Doctor's service checks (docs/services.md, "Doctor"): the workspace's deployed service (the one
 * deployed from the workspace's image repository) — its latest rollout, its replicas' health, and
 * the gateway's route to it answering. Skipped until the service is deployed; required once it is,
 * since then a failed rollout or no ready replica is something to mend before anything else.
 */
import type { ServiceRecord, ServiceReplica } from "../../services/record.ts";
import { type CheckResult, type DoctorCheck, type DoctorContext, fail, ok, skip, warn } from "./check.ts";

type Deployed = { record: ServiceRecord; replicas: ServiceReplica[]; baseUrl: string };

const found = new WeakMap<DoctorContext, Promise<Deployed | string>>();

/** The workspace's deployed service, or why there is none to check (a skip's summary). */
function deployed(ctx: DoctorContext): Promise<Deployed | string> {
  let answer = found.get(ctx);
  if (!answer) {
    answer = (async () => {
      const ws = await ctx.workspace().catch(() => undefined);
      const repository = ws?.settings.imageRepository;
      if (!repository) return "not in a workspace with an image repository";
      const api = await ctx.api().catch(() => undefined);
      if (!api) return "no credentials (see the credentials check)";
      const { data } = await api.request<{ data: ServiceRecord[] }>("GET", "/admin/v1/services");
      const record = data.find((s) => s.image_repository === repository);
      if (!record) return `nothing deployed from ${repository} yet (platform dev-center service deploy)`;
      const status = await api.request<{ replicas: ServiceReplica[] }>(
        "GET",
        `/admin/v1/services/${record.name}/status`,
      );
      return { record, replicas: status.replicas, baseUrl: (await ctx.platform()).url ?? "" };
    })();
    found.set(ctx, answer);
  }
  return answer;
}

async function withService(ctx: DoctorContext, check: (d: Deployed) => Promise<CheckResult> | CheckResult) {
  const d = await deployed(ctx);
  return typeof d === "string" ? skip(d) : check(d);
}

export const serviceRolloutCheck: DoctorCheck = {
  id: "service-rollout",
  name: "service rollout",
  required: true,
  run: (ctx) =>
    withService(ctx, ({ record }) => {
      const { rollout } = record;
      const what = `${record.name}: rollout ${rollout.id} (${rollout.release.tag})`;
      if (rollout.phase === "complete")
        return ok(`${what} complete`, { phase: rollout.phase, tag: rollout.release.tag });
      if (rollout.phase === "progressing")
        return warn(`${what} in progress`, `platform dev-center rollout status ${record.name} --watch`);
      return fail(
        `${what} failed: ${(rollout.reason ?? "").split("\n")[0]}${record.current ? `; ${record.current.tag} still serves` : ""}`,
        `platform dev-center logs ${record.name} shows why; fix it and roll out a new tag, or \`platform dev-center rollout undo ${record.name}\``,
      );
    }),
};

export const serviceReplicasCheck: DoctorCheck = {
  id: "service-replicas",
  name: "service replicas",
  required: true,
  run: (ctx) =>
    withService(ctx, ({ record, replicas }) => {
      const ready = replicas.filter((r) => r.state === "ready").length;
      const crashed = replicas.filter((r) => r.state === "crashed");
      const summary = `${record.name}: ${ready} of ${record.replicas} ready${crashed.length > 0 ? `, ${crashed.length} crashed (restarting)` : ""}`;
      if (ready === 0)
        return fail(
          summary,
          `platform dev-center rollout status ${record.name}; platform dev-center logs ${record.name}`,
        );
      if (ready < record.replicas || crashed.length > 0)
        return warn(summary, `platform dev-center logs ${record.name} shows what the replicas print`);
      return ok(summary, { ready, desired: record.replicas });
    }),
};

/**
 * The route, end to end but harmless: a call to a method the service does not have reaches the
 * gateway's route, which answers `unimplemented` once it found the service and a ready replica.
 */
export const serviceRouteCheck: DoctorCheck = {
  id: "service-route",
  name: "service route",
  required: true,
  run: (ctx) =>
    withService(ctx, async ({ record, baseUrl }) => {
      const rpc = record.rpc_services[0];
      if (!rpc)
        return warn(
          `${record.name} implements no published proto service`,
          "platform proto publish, then publish and roll out again",
        );
      const api = await ctx.api();
      const url = `/rpc/${rpc}/PlatformDoctorProbe`;
      const res = await api!.send("POST", url, { headers: { "content-type": "application/json" }, body: "{}" });
      const body = (await res.json().catch(() => ({}))) as { code?: string; message?: string };
      // A 404 without a Connect error body is `unimplemented` by Connect's rules: the service's own
      // answer for a method it lacks. The gateway's own 404s carry a code (`not_found`).
      const code = body.code ?? (res.status === 404 ? "unimplemented" : undefined);
      if (code === "unimplemented") return ok(`${baseUrl}/rpc/${rpc} answers`);
      return fail(
        `${baseUrl}/rpc/${rpc} answered ${res.status}${body.code ? ` ${body.code}` : ""}${body.message ? `: ${body.message}` : ""}`,
        `platform dev-center rollout status ${record.name}`,
      );
    }),
};
