/**
 * The CLI's credentials file and workspace file (src/client/credentials.ts, src/workspace/find.ts): one entry
 * per registry, the old one-key form read and migrated, 0600 in a 0700 directory written whole,
 * concurrent writers serialized by the lock, and `.platformrc.json` found by walking up.
 */
import { chmod, mkdir, mkdtemp, readdir, readFile, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { beforeEach, describe, expect, it } from "vitest";
import {
  readCredentials,
  resolveCredentials,
  resolveRegistry,
  updateCredentials,
  writeCredentials,
} from "../../src/client/credentials.ts";
import { findWorkspace } from "../../src/workspace/find.ts";
import { type CliSettings, loadCliSettings } from "../../src/settings/cli.ts";

let dir: string;
let cli: CliSettings;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-creds-unit-"));
  cli = loadCliSettings({ PLATFORM_CONFIG_DIR: join(dir, "config") });
});

describe("credentials file", () => {
  it("reads the old {base_url, api_key} form as one entry, and writes it in the new form on the next write", async () => {
    await mkdir(join(dir, "config"));
    await writeFile(
      cli.credentialsFile,
      JSON.stringify({ base_url: "http://127.0.0.1:8000/", api_key: "sk-plat-old" }),
    );
    expect(await readCredentials(cli)).toEqual({
      registries: { "http://127.0.0.1:8000": { api_key: "sk-plat-old" } },
      default: "http://127.0.0.1:8000",
    });
    expect(await resolveCredentials(cli)).toEqual({ base_url: "http://127.0.0.1:8000", api_key: "sk-plat-old" });
    await writeCredentials({ base_url: "https://platform.example.com", api_key: "sk-plat-new" }, cli);
    expect(JSON.parse(await readFile(cli.credentialsFile, "utf8"))).toEqual({
      registries: {
        "http://127.0.0.1:8000": { api_key: "sk-plat-old" },
        "https://platform.example.com": { api_key: "sk-plat-new" },
      },
      default: "https://platform.example.com",
    });
  });

  it("is 0600 in a 0700 directory, tightened when found looser, and leaves no temp file", async () => {
    await mkdir(join(dir, "config"), { mode: 0o755 });
    await chmod(join(dir, "config"), 0o755);
    await writeCredentials({ base_url: "http://127.0.0.1:8000", api_key: "sk-plat-a" }, cli);
    expect((await stat(cli.credentialsFile)).mode & 0o777).toBe(0o600);
    expect((await stat(join(dir, "config"))).mode & 0o777).toBe(0o700);
    expect(await readdir(join(dir, "config"))).toEqual(["credentials.json"]);
  });

  it("names a file that does not parse, and a new sign-in sets it aside rather than failing", async () => {
    await mkdir(join(dir, "config"));
    await writeFile(cli.credentialsFile, "{nope");
    await expect(resolveCredentials(cli)).rejects.toThrow(`${cli.credentialsFile}: not valid JSON`);
    await writeCredentials({ base_url: "http://127.0.0.1:8000", api_key: "sk-plat-a" }, cli);
    expect((await readCredentials(cli)).registries).toEqual({ "http://127.0.0.1:8000": { api_key: "sk-plat-a" } });
    expect(await readFile(`${cli.credentialsFile}.invalid`, "utf8")).toBe("{nope");
  });

  it("serializes writers: twenty commands saving at once all land", async () => {
    await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        updateCredentials((file) => {
          file.registries[`http://10.0.0.${i}:8000`] = { token: `pt_${i}`, refresh_token: `ptr_${i}` };
        }, cli),
      ),
    );
    expect(Object.keys((await readCredentials(cli)).registries)).toHaveLength(20);
    expect(await readdir(join(dir, "config"))).toEqual(["credentials.json"]);
  });

  it("picks the registry: the one named, else the workspace's, else PLATFORM_BASE_URL, else the default", async () => {
    const file = { registries: {}, default: "http://default:1" };
    // No .platformrc.json above the test's working directory (the repository).
    expect(await resolveRegistry(cli, file)).toBe("http://default:1");
    const env = loadCliSettings({ PLATFORM_CONFIG_DIR: dir, PLATFORM_BASE_URL: "http://env:2/" });
    expect(await resolveRegistry(env, file)).toBe("http://env:2");
    expect(await resolveRegistry(env, file, "http://named:3")).toBe("http://named:3");
    // A token entry is a credential as an API key is; PLATFORM_API_KEY wins over both.
    await updateCredentials((f) => {
      f.registries["http://default:1"] = { token: "pt_x", refresh_token: "ptr_x", expires: new Date().toISOString() };
      f.default = "http://default:1";
    }, cli);
    expect(await resolveCredentials(cli)).toMatchObject({ base_url: "http://default:1", token: "pt_x" });
    const keyed = loadCliSettings({ PLATFORM_CONFIG_DIR: join(dir, "config"), PLATFORM_API_KEY: "sk-plat-env" });
    expect(await resolveCredentials(keyed)).toEqual({ base_url: "http://default:1", api_key: "sk-plat-env" });
    await expect(resolveCredentials(cli, "http://unknown:4")).rejects.toThrow(/not logged in to http:\/\/unknown:4/);
  });
});

describe(".platformrc.json", () => {
  it("is found by walking up from a directory, and its errors name the file", async () => {
    const root = join(dir, "ws");
    await mkdir(join(root, "a", "b"), { recursive: true });
    expect(await findWorkspace(join(root, "a", "b"))).toBeUndefined();
    await writeFile(
      join(root, ".platformrc.json"),
      JSON.stringify({ $schema: "x", registryUrl: "https://platform.example.com", orgId: "acme", later: 1 }),
    );
    expect(await findWorkspace(join(root, "a", "b"))).toEqual({
      root,
      file: join(root, ".platformrc.json"),
      config: { registryUrl: "https://platform.example.com", orgId: "acme" },
    });
    await writeFile(join(root, "a", ".platformrc.json"), JSON.stringify({ registryUrl: "ftp://x", orgId: "Acme!" }));
    const e = await findWorkspace(join(root, "a", "b")).catch((error: unknown) => error);
    expect(String((e as Error).message)).toMatch(
      /\.platformrc\.json: registryUrl: expected the platform's http\(s\) base URL/,
    );
    expect(String((e as Error).message)).toMatch(/orgId: expected an organization id/);
    expect(e).toMatchObject({ exitCode: 2 });
    await writeFile(join(root, "a", ".platformrc.json"), "{nope");
    await expect(findWorkspace(join(root, "a"))).rejects.toThrow(/a\/\.platformrc\.json: not valid JSON/);
  });
});
