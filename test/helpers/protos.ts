/**
 * A team's workspace for the proto tests, as `platform init` leaves it (`.platformrc.json`, the
 * `buf.yaml` it writes) with the example ItemService, and the Python with grpcio-tools that
 * `proto generate --lang python` runs in.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

/** Exactly what `platform init` writes. */
export const BUF_YAML = `version: v2
modules:
  - path: proto
lint:
  use:
    - STANDARD
    - COMMENT_SERVICE
    - COMMENT_RPC
breaking:
  use:
    - WIRE_JSON
`;

/** The example ItemService. */
export const ITEMS_PROTO = `syntax = "proto3";

package platform.items.v1;

// ItemService stores items and reads them back.
service ItemService {
  // GetItem returns the item with the given id.
  rpc GetItem(GetItemRequest) returns (GetItemResponse);
  // ListItems returns the items, oldest first.
  rpc ListItems(ListItemsRequest) returns (ListItemsResponse);
  // CreateItem stores a new item and returns it with its id.
  rpc CreateItem(CreateItemRequest) returns (CreateItemResponse);
}

// An item.
message Item {
  string id = 1;
  string name = 2;
  string description = 3;
}

message GetItemRequest {
  string id = 1;
}

message GetItemResponse {
  Item item = 1;
}

message ListItemsRequest {
  int32 page_size = 1;
  string page_token = 2;
}

message ListItemsResponse {
  repeated Item items = 1;
  string next_page_token = 2;
}

message CreateItemRequest {
  string name = 1;
  string description = 2;
}

message CreateItemResponse {
  Item item = 1;
}
`;

export const ITEMS_PATH = "proto/platform/items/v1/items.proto";

/** Writes `files` (path → text) under `dir`. */
export async function writeFiles(dir: string, files: Record<string, string>): Promise<void> {
  for (const [path, text] of Object.entries(files)) {
    await mkdir(dirname(join(dir, path)), { recursive: true });
    await writeFile(join(dir, path), text);
  }
}

/**
 * A fresh workspace in a temp directory: `.platformrc.json` with `config` (over a registry URL and
 * organization that the offline commands never reach), buf.yaml, the ItemService.
 */
export async function makeWorkspace(config: Record<string, unknown> = {}): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "platform-protos-"));
  await writeFiles(dir, {
    ".platformrc.json": `${JSON.stringify({ registryUrl: "http://127.0.0.1:9", orgId: "acme", ...config }, null, 2)}\n`,
    "buf.yaml": BUF_YAML,
    [ITEMS_PATH]: ITEMS_PROTO,
  });
  return dir;
}

/**
 * The Python with grpcio-tools: PLATFORM_TEST_PYTHON_GRPC, else the checkout's `.venv-grpc` (made
 * by scripts/protos/setup-python.sh, which .ci/run calls); undefined where neither exists.
 */
export function grpcPython(): string | undefined {
  const fromEnv = process.env.PLATFORM_TEST_PYTHON_GRPC;
  if (fromEnv !== undefined && fromEnv !== "") return existsSync(fromEnv) ? fromEnv : undefined;
  const venv = join(ROOT, ".venv-grpc", "bin", "python");
  return existsSync(venv) ? venv : undefined;
}

/**
 * A service workspace as a team starts one for the image tests: `.platformrc.json` (organization
 * acme, `config` for the rest), buf.yaml and the ItemService proto, git's exclude (the CLI's config
 * directory, and `exclude`), and `git init`.
 */
export async function writeItemsWorkspace(
  dir: string,
  config: Record<string, unknown>,
  exclude: string[] = [],
): Promise<void> {
  await writeFiles(dir, {
    ".platformrc.json": `${JSON.stringify({ orgId: "acme", ...config }, null, 2)}\n`,
    "buf.yaml": BUF_YAML,
    [ITEMS_PATH]: ITEMS_PROTO,
    ".git/info/exclude": [".config/", ...exclude].map((l) => `${l}\n`).join(""),
  });
  execFileSync("git", ["init", "-q"], { cwd: dir });
}
