/**
 * Doctor's platform checks: the platform gateway answers (with its version), the credentials stored
 * for it are present, live and accepted, and they see the workspace's organization.
 */
import { PLATFORM_VERSION } from "../../contracts/version.ts";
import { CliError } from "../common/errors.ts";
import { probeOrg } from "../common/probe.ts";
import { type CheckResult, type DoctorCheck, type DoctorContext, fail, ok, skip, warn } from "./check.ts";

const LOGIN_FIX = "run `platform auth login` (or `platform auth login --api-key <key>` in scripts)";

/** The platform's URL, or the result of a check that cannot run without one. */
async function platformUrl(ctx: DoctorContext): Promise<string | CheckResult> {
  const parses = await ctx.workspace().then(
    () => true,
    () => false,
  );
  if (!parses) return skip("not checked: .platformrc.json does not parse (above)");
  const { url } = await ctx.platform();
  return (
    url ??
    fail(
      "no platform: not in a workspace, PLATFORM_BASE_URL is not set and the credentials name no default",
      "run `platform init --registry-url <url> --org-id <id>` at the repository's root",
    )
  );
}

export const platformCheck: DoctorCheck = {
  id: "registry",
  name: "platform",
  required: true,
  run: async (ctx) => {
    const url = await platformUrl(ctx);
    if (typeof url !== "string") return url;
    const probe = await ctx.probe();
    if (!probe?.ok)
      return fail(
        probe?.message ?? url,
        probe?.problem === "not_a_platform"
          ? "registryUrl is the platform's base URL, the gateway's without /v1 (`platform init --force` writes it again)"
          : "check registryUrl in .platformrc.json (or PLATFORM_BASE_URL) and that the platform runs there (`platform up` starts one here)",
      );
    const details = { url, version: probe.version };
    if (probe.version !== PLATFORM_VERSION)
      return warn(
        `${url}: platform ${probe.version}, while this CLI is ${PLATFORM_VERSION}`,
        `install the CLI of the platform's version, ${probe.version}`,
        details,
      );
    return ok(`${url}: platform ${probe.version}`, details);
  },
};

export const credentialsCheck: DoctorCheck = {
  id: "credentials",
  name: "credentials",
  required: true,
  run: async (ctx) => {
    const url = await platformUrl(ctx);
    if (typeof url !== "string") return skip("not checked: no platform (above)");
    const { credentials } = await ctx.platform();
    if (!credentials) return fail(`not logged in to ${url}: no credentials in ${ctx.cli.credentialsFile}`, LOGIN_FIX);
    if (!(await ctx.probe())?.ok) return skip(`not checked: ${url} does not answer as a platform (above)`);
    const me = await ctx.whoami().catch((e: unknown) => {
      if (e instanceof CliError) return e;
      throw e;
    });
    if (me instanceof CliError) return fail(me.message, LOGIN_FIX);
    const kind = ctx.cli.apiKey ? "PLATFORM_API_KEY" : credentials.token ? "a CLI token" : "an API key";
    const until = me.token ? `, until ${new Date(me.token.expires).toISOString()}` : "";
    return ok(
      `${url}: ${me.name}, ${me.role} of organization ${me.org}${me.operator ? " (operator)" : ""}, with ${kind}${until}`,
      {
        url,
        name: me.name,
        org: me.org,
        role: me.role,
        operator: me.operator,
        ...(me.token ? { expires: me.token.expires } : {}),
      },
    );
  },
};

export const organizationCheck: DoctorCheck = {
  id: "organization",
  name: "organization",
  required: true,
  run: async (ctx) => {
    const ws = await ctx.workspace().catch(() => undefined);
    if (!ws) return skip("not checked: no valid .platformrc.json (above)");
    const { orgId } = ws.settings;
    const me = await ctx.whoami().catch(() => undefined);
    const api = await ctx.api();
    if (!me || !api) return skip(`not checked: ${orgId} needs accepted credentials (above)`);
    if (!me.operator && me.org !== orgId)
      return fail(
        `signed in as ${me.name} of organization ${me.org}, but the workspace belongs to ${orgId}`,
        `run \`platform auth login\` as a member of ${orgId}, or correct orgId in ${ws.file}`,
      );
    const found = await probeOrg(api, orgId);
    if (!found.ok) return fail(found.message, `correct orgId in ${ws.file}, or ask an operator to create it`);
    return ok(`${orgId} (${found.org.name})`, { id: orgId, name: found.org.name });
  },
};
