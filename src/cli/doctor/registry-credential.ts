/**
 * Doctor's registry-credential check (docs/services.md, "Pulling from a private registry"): the
 * platform has a credential to pull the workspace's image repository with, for the caller's
 * organization: its own (`platform registry credentials set`), the platform's token server (a
 * registry that trusts it), or the operator's PLATFORM_IMAGE_PULL_AUTH_FILE. Not required: a
 * public registry needs none, and nothing is deployed before `publish`.
 */
import type { PullSource } from "../../registry-credentials/resolve.ts";
import { fixPullCommand } from "../../registry-credentials/resolve.ts";
import { type DoctorCheck, ok, skip, warn } from "./check.ts";

const SAYS: Record<Exclude<PullSource, "none">, string> = {
  organization: "the organization's own credential (platform registry credentials list)",
  token_server: "the platform's token server: the registry trusts it, deploys need no credential",
  operator: "the operator's pull file (PLATFORM_IMAGE_PULL_AUTH_FILE)",
};

export const registryCredentialCheck: DoctorCheck = {
  id: "pull-credential",
  name: "registry credential",
  required: false,
  run: async (ctx) => {
    const ws = await ctx.workspace().catch(() => undefined);
    const repository = ws?.settings.imageRepository;
    if (!repository) return skip("not checked: no image repository (above)");
    const api = await ctx.api().catch(() => undefined);
    if (!api) return skip("not checked: no credentials (see the credentials check)");
    const answer = await api
      .request<{ host: string; source: PullSource }>(
        "GET",
        `/admin/v1/registry-credentials/source?repository=${encodeURIComponent(repository)}`,
      )
      .catch((e: Error) => e);
    if (answer instanceof Error) {
      if (/unknown_route/.test(answer.message))
        return skip("not checked: this platform predates per-organization pull credentials");
      // The operator's registry policy refuses the repository's registry (docs/security.md, "Outbound calls a tenant names").
      if (/may come only from|which image registries may not be at/.test(answer.message))
        return warn(
          answer.message,
          "set imageRepository in .platformrc.json to a registry this platform allows (ask its operator)",
        );
      return warn(
        `could not ask the platform: ${answer.message}`,
        "run platform doctor again once the gateway answers",
      );
    }
    if (answer.source === "none")
      return warn(
        `the platform has no credential to pull ${repository} for your organization: a private registry refuses its deploys`,
        `an admin of the organization runs: ${fixPullCommand(answer.host)}`,
        { host: answer.host, source: answer.source },
      );
    return ok(`${answer.host}: ${SAYS[answer.source]}`, { host: answer.host, source: answer.source });
  },
};
