/**
 * Settings errors never echo a secret (docs/security.md, "Anonymous callers"): the key itself
 * given where PLATFORM_REGISTRY_TOKEN_KEY wants its path made `platform gateway` print the whole
 * private key. The real CLI, started with such an environment, must refuse naming the variable
 * and print no line of the key; so must any setting error carrying a secret variable's value.
 */
import { execFile } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { loadSettings } from "../../src/settings/index.ts";
import { hideSecrets } from "../../src/settings/secrets.ts";
import { BIN } from "../helpers/stack.ts";

const run = promisify(execFile);

const pem = generateKeyPairSync("ec", { namedCurve: "prime256v1" })
  .privateKey.export({ type: "pkcs8", format: "pem" })
  .toString();
const keyLines = pem.split("\n").filter((l) => l.length > 0 && !l.startsWith("-----"));

describe("settings errors", () => {
  it("`platform gateway` with a PEM where the key's path goes: refused, naming the variable, printing none of it", {
    timeout: 60_000,
  }, async () => {
    const failed = await run(process.execPath, [BIN, "gateway", "--port", "0"], {
      env: { ...process.env, REDIS_URL: "redis://127.0.0.1:1", PLATFORM_REGISTRY_TOKEN_KEY: pem },
    }).catch((e: { code: number; stdout: string; stderr: string }) => e);
    const { code, stdout, stderr } = failed as { code: number; stdout: string; stderr: string };
    expect(code).not.toBe(0);
    expect(stderr).toContain("PLATFORM_REGISTRY_TOKEN_KEY");
    expect(stderr).toContain("not the key itself");
    for (const line of keyLines) {
      expect(stderr).not.toContain(line);
      expect(stdout).not.toContain(line);
    }
    expect(stderr).not.toContain("PRIVATE KEY");
  });

  it("keeps every secret variable's value out of a message, whatever worded it", () => {
    const env = { AWS_SECRET_ACCESS_KEY: "wJalrXUtnFEMI/K7MDENG", OTHER: "visible-value", KEY_FILE: pem };
    const message = hideSecrets(`a: got "wJalrXUtnFEMI/K7MDENG"; b: "visible-value"; c: ${keyLines[0]}`, env);
    expect(message).not.toContain("wJalrXUtnFEMI");
    expect(message).toContain("<the value of AWS_SECRET_ACCESS_KEY>");
    expect(message).toContain("visible-value");
    expect(message).not.toContain(keyLines[0] as string);
    // Through the one parse: a bad PLATFORM_SECRETS_KEY is named, its value not shown.
    const secret = "not-a-key-but-a-secret-anyway";
    const error = (() => {
      try {
        loadSettings({ PLATFORM_SECRETS_KEY: secret });
      } catch (e) {
        return (e as Error).message;
      }
    })();
    expect(error).toContain("PLATFORM_SECRETS_KEY");
    expect(error).not.toContain(secret);
  });
});
