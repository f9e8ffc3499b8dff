/**
 * The local backend through a container engine (scaler/container-images/engine.ts), with stand-in `docker`
 * and `podman` CLIs (no engine daemon runs on these machines): what each is asked (pull by digest
 * with the pull session, `run --rm --network none --user --cap-drop ALL …`, variables in an env
 * file), that the service gets its values through its own network namespace (nsenter and socat,
 * the host side on loopback) and the command line holds none, that SIGTERM to the group stops it, that it ends
 * with the platform process even when that is SIGKILLed, and which engine `auto` picks.
 */
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { engineRunner, workingEngine } from "../../scaler/container-images/engine.ts";
import { freePort } from "../../src/process/free-port.ts";

let dir: string;
let log: string;
const SECRET = "hunter2-not-in-argv";
const DIGEST = `sha256:${"c".repeat(64)}`;

/**
 * A stand-in engine CLI: logs its arguments and DOCKER_CONFIG's config.json, answers `info` as
 * told, `image inspect` with the image's user (root: none), `inspect` with the container's pid,
 * and for `run` starts a server in a network namespace of its own (as `--network none` does) with
 * only the variables of `--env-file`, its lines kept as one is for the CLI to remove once running.
 */
function standIn(name: string, infoWorks: boolean): string {
  return `#!/bin/bash
echo "${name} $*" >> ${log}
[ -n "$DOCKER_CONFIG" ] && echo "config $(cat "$DOCKER_CONFIG/config.json")" >> ${log}
case "$1" in
  info) exit ${infoWorks ? 0 : 1} ;;
  pull) exit 0 ;;
  image) echo "" ;;
  inspect) cat "${dir}/pid-$4" 2>/dev/null || echo 0 ;;
  run)
    shift; vars=(); cname=
    while [ $# -gt 1 ]; do
      case "$1" in
        --env-file) while IFS= read -r line; do vars+=("$line"); done < "$2"; shift 2 ;;
        --name) cname="$2"; shift 2 ;;
        *) shift ;;
      esac
    done
    echo "environment of $cname: \${vars[*]}" > ${dir}/env-seen
    exec /usr/bin/unshare --net /bin/sh -c '/usr/sbin/ip link set lo up; echo $$ > "$0"; exec "$@"' "${dir}/pid-$cname" \
      env -i PATH="$PATH" "\${vars[@]}" ${process.execPath} -e '
      const http = require("node:http");
      const server = http.createServer((q, s) => s.end(JSON.stringify(process.env)));
      server.listen(Number(process.env.PORT), "127.0.0.1", () => console.log("listening"));
      process.on("SIGTERM", () => { console.log("stopping"); process.exit(0); });' ;;
esac
`;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-engine-"));
  log = join(dir, "calls.log");
  await writeFile(join(dir, "docker"), standIn("docker", false));
  await writeFile(join(dir, "podman"), standIn("podman", true));
  await chmod(join(dir, "docker"), 0o755);
  await chmod(join(dir, "podman"), 0o755);
  await writeFile(
    join(dir, "auth.json"),
    JSON.stringify({ auths: { "127.0.0.1:5000": { auth: Buffer.from("team:pw-123456").toString("base64") } } }),
  );
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const calls = () => readFileSync(log, "utf8");

describe("services through a container engine", () => {
  it("auto picks the first engine that answers info", async () => {
    expect(await workingEngine({ docker: join(dir, "docker"), podman: join(dir, "podman") })).toBe("podman");
    expect(await workingEngine({ docker: join(dir, "nope"), podman: join(dir, "nope") })).toBeUndefined();
  });

  it("podman: pulls by digest with the session, runs sandboxed in a network of its own, values in a file", async () => {
    const runner = engineRunner("podman", { authFile: join(dir, "auth.json"), bin: join(dir, "podman") });
    const prepared = await runner.prepare("127.0.0.1:5000/acme/items", DIGEST, "acme");
    expect(calls()).toContain(
      `podman pull --quiet --authfile ${join(dir, "auth.json")} --tls-verify=false 127.0.0.1:5000/acme/items@${DIGEST}`,
    );
    const port = await freePort();
    const child = runner.spawn(prepared, { PORT: String(port), HOST: "127.0.0.1", TOKEN: SECRET }, [port]);
    let out = "";
    child.stdout?.on("data", (d) => (out += d));
    await expect.poll(() => out, { timeout: 10_000 }).toContain("listening");
    // Reachable once the forwarder has entered the container's network namespace.
    const answer = () => fetch(`http://127.0.0.1:${port}/`).then((r) => r.json() as Promise<Record<string, string>>);
    await expect.poll(() => answer().catch(() => undefined), { timeout: 10_000 }).toBeDefined();
    const seen = await answer();
    expect(seen).toMatchObject({ PORT: String(port), TOKEN: SECRET });
    expect(seen.REDIS_URL).toBeUndefined();
    const run =
      calls()
        .split("\n")
        .find((l) => l.startsWith("podman run")) ?? "";
    // Sandboxed: no host network, the unprivileged id for an image naming no user, no capability.
    expect(run).toMatch(
      new RegExp(
        `^podman run --rm --pull=never --name platform-replica-[0-9a-f]{12} --network none --user 65534:65534 --cap-drop ALL --security-opt no-new-privileges --read-only --tmpfs /tmp --env-file /\\S+/env 127\\.0\\.0\\.1:5000/acme/items@${DIGEST}$`,
      ),
    );
    expect(calls()).not.toContain(SECRET);
    // The values went through the env file, which is gone once the container runs.
    const envFile = /--env-file (\S+)/.exec(run)?.[1] as string;
    await expect.poll(() => existsSync(envFile)).toBe(false);
    const exited = new Promise((r) => child.once("exit", r));
    process.kill(-(child.pid as number), "SIGTERM");
    await exited;
    expect(out).toContain("stopping");
  });

  it("docker: the pull session as DOCKER_CONFIG's config.json; a failed pull names the engine, never the password", async () => {
    const runner = engineRunner("docker", { authFile: join(dir, "auth.json"), bin: join(dir, "docker") });
    await runner.prepare("127.0.0.1:5000/acme/items", DIGEST, "acme");
    expect(calls()).toContain(`docker pull --quiet 127.0.0.1:5000/acme/items@${DIGEST}`);
    expect(calls()).toContain(`config ${readFileSync(join(dir, "auth.json"), "utf8")}`);
    const failing = engineRunner("podman", { authFile: join(dir, "auth.json"), bin: join(dir, "missing-podman") });
    await expect(failing.prepare("127.0.0.1:5000/acme/items", DIGEST, "acme")).rejects.toThrow(
      /^pulling 127.0.0.1:5000\/acme\/items@sha256:c+ with podman failed: /,
    );
  });

  it("an organization's credential: a private auth file for the one pull, removed after; never in argv", async () => {
    const auth = async (org: string) =>
      org === "acme"
        ? ({ source: "organization", host: "127.0.0.1:5000", username: "team", password: SECRET } as const)
        : ({ source: "none" } as const);
    const docker = engineRunner("docker", { auth, bin: join(dir, "docker") });
    await docker.prepare("127.0.0.1:5000/acme/items", DIGEST, "acme");
    const configLine =
      calls()
        .split("\n")
        .findLast((l) => l.startsWith("config ")) ?? "";
    expect(JSON.parse(configLine.slice("config ".length)).auths["127.0.0.1:5000"].auth).toBe(
      Buffer.from(`team:${SECRET}`).toString("base64"),
    );
    const podman = engineRunner("podman", { auth, bin: join(dir, "podman") });
    await podman.prepare("127.0.0.1:5000/acme/items", DIGEST, "acme");
    const pull =
      calls()
        .split("\n")
        .findLast((l) => l.startsWith("podman pull")) ?? "";
    const file = /--authfile (\S+)/.exec(pull)?.[1] as string;
    expect(file).toMatch(/platform-pull-[^/]+\/auth\.json$/);
    expect(existsSync(file)).toBe(false);
    await podman.prepare("127.0.0.1:5000/rival/items", DIGEST, "rival");
    expect(
      calls()
        .split("\n")
        .findLast((l) => l.startsWith("podman pull")),
    ).toBe(`podman pull --quiet --tls-verify=false 127.0.0.1:5000/rival/items@${DIGEST}`);
    expect(
      calls()
        .split("\n")
        .filter((l) => !l.startsWith("config "))
        .join("\n"),
    ).not.toContain(SECRET);
  });

  it("a service ends with the platform process, even when that is SIGKILLed", async () => {
    const port = await freePort();
    const engine = new URL("../../scaler/container-images/engine.ts", import.meta.url).pathname;
    // A stand-in platform: starts the service through the runner, says so, and waits to be killed.
    const platform = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `const { engineRunner } = await import(${JSON.stringify(engine)});
         const runner = engineRunner("podman", { bin: ${JSON.stringify(join(dir, "podman"))} });
         const child = runner.spawn(await runner.prepare("127.0.0.1:5000/acme/items", ${JSON.stringify(DIGEST)}), { PORT: "${port}" }, [${port}]);
         child.stdout.on("data", (d) => process.stdout.write(d));
         setInterval(() => {}, 1000);`,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    let out = "";
    platform.stdout?.on("data", (d) => (out += d));
    await expect.poll(() => out, { timeout: 10_000 }).toContain("listening");
    await expect
      .poll(
        () =>
          fetch(`http://127.0.0.1:${port}/`).then(
            (r) => r.status,
            () => 0,
          ),
        { timeout: 10_000 },
      )
      .toBe(200);
    platform.kill("SIGKILL");
    await expect
      .poll(
        () =>
          fetch(`http://127.0.0.1:${port}/`).then(
            () => "answering",
            () => "gone",
          ),
        { timeout: 10_000 },
      )
      .toBe("gone");
  });
});
