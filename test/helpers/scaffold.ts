/**
 * What the scaffold tests share: whether the npm registry answers (the scaffolds install from it),
 * the npm cache kept between runs in the temp directory, and a step runner that fails the test
 * with the command's output and records how long each step took.
 */
import { execFile, spawn } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { expect } from "vitest";

const exec = promisify(execFile);

/** Kept between runs (and between the test files), so a second install reads the cache. */
export const NPM_CACHE = join(tmpdir(), "platform-scaffold-npm-cache");

/** Why the npm registry cannot be used here, or undefined when it answers. */
export async function npmRegistryUnavailable(): Promise<string | undefined> {
  try {
    const { stdout } = await exec("npm", ["config", "get", "registry"], { timeout: 20_000 });
    const registry = stdout.trim().replace(/\/$/, "");
    const res = await fetch(`${registry}/@connectrpc%2fconnect`, { signal: AbortSignal.timeout(15_000) });
    return res.ok ? undefined : `the npm registry ${registry} answered HTTP ${res.status}`;
  } catch (e) {
    return `the npm registry cannot be reached (${(e as Error).message})`;
  }
}

/** Runs a command in `cwd`, failing the test with its output when it fails; its time goes to `timings`. */
export async function step(
  timings: Record<string, number>,
  label: string,
  cwd: string,
  program: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<string> {
  const started = Date.now();
  const r = await new Promise<{ code: number | null; output: string }>((resolve) => {
    const child = spawn(program, args, {
      cwd,
      env: { ...process.env, npm_config_cache: NPM_CACHE, npm_config_update_notifier: "false", NO_COLOR: "1", ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    child.once("close", (code) => resolve({ code, output }));
  });
  timings[label] = Math.round((Date.now() - started) / 100) / 10;
  expect(r.code, `${label} (${program} ${args.join(" ")}) failed:\n${r.output.slice(-6000)}`).toBe(0);
  return r.output;
}

/**
 * `npm ci`, as a scaffold installs (its package-lock.json), from the cache where it can; `cache`:
 * another npm cache than NPM_CACHE (an empty one is what a new machine has).
 */
export const npmInstall = (timings: Record<string, number>, label: string, cwd: string, cache?: string) =>
  step(
    timings,
    label,
    cwd,
    "npm",
    ["ci", "--prefer-offline", "--no-audit", "--no-fund"],
    cache ? { npm_config_cache: cache } : {},
  );

/** An ItemService client a team would write in Python: one call, its answer (or status) as JSON. */
export const ITEMS_PY_CLIENT = `"""One ItemService call against 127.0.0.1:PORT, printed as JSON."""
import json

import grpc
from google.protobuf.json_format import MessageToDict

from items.v1 import items_pb2, items_pb2_grpc


def main(args: list[str]) -> None:
    port, action, *rest = args
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = items_pb2_grpc.ItemServiceStub(channel)
        try:
            if action == "create":
                out = MessageToDict(stub.CreateItem(items_pb2.CreateItemRequest(name=rest[0], description=rest[1]), timeout=10).item)
            elif action == "get":
                out = MessageToDict(stub.GetItem(items_pb2.GetItemRequest(id=rest[0]), timeout=10).item)
            else:
                out = [MessageToDict(i) for i in stub.ListItems(items_pb2.ListItemsRequest(page_size=1000), timeout=10).items]
        except grpc.RpcError as e:
            out = {"code": e.code().name, "message": e.details()}
    print(json.dumps(out))
`;
/** Python code calling client.py's main from the workspace root, the stubs on the path. */
export const ITEMS_PY_CLIENT_CALL = "import sys; sys.path[:0] = ['src/__generated__', '.']; import client; client.main";
