/**
 * Putting a model behind an endpoint on a running stack and waiting until it serves: what
 * `platform up --model` does at start, for a file that deploys on a stack it shares.
 */
import { expect } from "vitest";
import { type Stack, waitAvailable } from "./stack.ts";

export type Deployment = {
  /** The model's source (a path under a storage root); omit it to deploy a model already registered. */
  source?: string;
  framework?: string;
  /** The version to register and serve. */
  version?: string;
  /** More of the registration body (`task`, `tokenizer`, ...). */
  model?: Record<string, unknown>;
  /** More of the endpoint body (`runtime`, `autoscaling`, ...); `resources` defaults to one replica. */
  endpoint?: Record<string, unknown>;
  /** Wait until it is `available` (the default). */
  wait?: boolean;
};

/** Registers `source` as model `name` (when given) and deploys endpoint `name` on it. */
export async function deploy(stack: Stack, name: string, options: Deployment = {}): Promise<void> {
  const { source, framework = "llamacpp", version, model = {}, endpoint = {}, wait = true } = options;
  if (source !== undefined) {
    const reg = await stack.admin("POST", "/admin/v1/models", { name, framework, source, version, ...model });
    expect(reg.status, JSON.stringify(reg.body)).toBe(201);
  }
  const res = await stack.admin("PUT", `/admin/v1/endpoints/${name}`, {
    model: { name, ...(version ? { version } : {}) },
    resources: { replicas: 1 },
    ...endpoint,
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  if (wait) await waitAvailable(stack, name);
}

/** Deletes the endpoints a file deployed on a shared stack, so their replicas stop with the file. */
export async function undeploy(stack: Stack | undefined, ...names: string[]): Promise<void> {
  if (!stack) return;
  for (const name of names) {
    const res = await stack.admin("DELETE", `/admin/v1/endpoints/${name}`);
    expect([200, 204, 404], JSON.stringify(res.body)).toContain(res.status);
  }
}
