/**
 * The tools section: where the machine's tools keep their state, read from the variables the tools
 * themselves read (the Kubernetes client, docker, podman, buildah). `platform doctor` loads it
 * alone, beside the cli section; no server role needs it, so `loadSettings()` leaves it out.
 */
import { homedir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { optional, parse } from "./parse.ts";

export const toolsShape = {
  KUBECONFIG: optional(z.string()),
  KUBERNETES_SERVICE_HOST: optional(z.string()),
  DOCKER_CONFIG: optional(z.string()),
  REGISTRY_AUTH_FILE: optional(z.string()),
  CONTAINERS_REGISTRIES_CONF: optional(z.string()),
  XDG_RUNTIME_DIR: optional(z.string()),
  XDG_CONFIG_HOME: optional(z.string()),
};

export type ToolSettings = {
  /** Where a Kubernetes backend would find its cluster: KUBECONFIG, else in a pod its service account; else none. */
  kubernetes: "kubeconfig" | "in-cluster" | undefined;
  /**
   * The files image builders keep registry sessions in, in the order podman and buildah read them
   * (containers-auth.json(5)), docker's config.json last.
   */
  registryAuthFiles: string[];
  /**
   * Where buildah and podman keep their sessions (and write `login`s): REGISTRY_AUTH_FILE, else
   * `$XDG_RUNTIME_DIR/containers/auth.json`, else `/run/containers/<uid>/auth.json`.
   */
  containersAuthFile: string;
  /** Where docker keeps its sessions: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`. */
  dockerConfigFile: string;
  /**
   * The registries.conf buildah and podman read (containers-registries.conf(5)): the first of these
   * that exists. CONTAINERS_REGISTRIES_CONF alone where set, else the user's, then the system's.
   */
  registriesConfFiles: string[];
};

export function toolSettings(e: z.infer<z.ZodObject<typeof toolsShape>>): ToolSettings {
  const containersAuthFile =
    e.REGISTRY_AUTH_FILE ??
    (e.XDG_RUNTIME_DIR
      ? join(e.XDG_RUNTIME_DIR, "containers", "auth.json")
      : join("/run/containers", String(process.getuid?.() ?? 0), "auth.json"));
  const dockerConfigFile = join(e.DOCKER_CONFIG ?? join(homedir(), ".docker"), "config.json");
  return {
    kubernetes: e.KUBECONFIG ? "kubeconfig" : e.KUBERNETES_SERVICE_HOST ? "in-cluster" : undefined,
    registryAuthFiles: [
      containersAuthFile,
      join(e.XDG_CONFIG_HOME ?? join(homedir(), ".config"), "containers", "auth.json"),
      dockerConfigFile,
    ],
    containersAuthFile,
    dockerConfigFile,
    registriesConfFiles: e.CONTAINERS_REGISTRIES_CONF
      ? [e.CONTAINERS_REGISTRIES_CONF]
      : [join(homedir(), ".config", "containers", "registries.conf"), "/etc/containers/registries.conf"],
  };
}

export function loadToolSettings(env: NodeJS.ProcessEnv = process.env): ToolSettings {
  return toolSettings(parse(z.object(toolsShape), env));
}
