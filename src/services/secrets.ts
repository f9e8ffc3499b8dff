/**
 * Services' secrets at rest (docs/services.md, "Secrets"): AES-256-GCM under the platform's key
 * (PLATFORM_SECRETS_KEY, or one generated once into `<data dir>/secrets.key`, mode 0600). Each
 * value is sealed with its organization, service and name as additional data, so a sealed value
 * copied onto another secret or service does not open. Only the scaler opens them, to start a
 * release's replicas; nothing the API answers holds one.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import type { ServicesSettings } from "../settings/services.ts";

const VERSION = "v1";
/** GCM's full 128-bit tag, as seal writes it; open accepts no other length. */
const TAG_BYTES = 16;

export class SecretBox {
  private readonly key: Buffer;
  private constructor(key: Buffer) {
    this.key = key;
  }

  /** The settings' key, or the data directory's key file (created on first use, 0600). */
  static async load(
    settings: Pick<ServicesSettings, "secretsKey" | "secretsKeyFile" | "keyRequired">,
  ): Promise<SecretBox> {
    if (settings.secretsKey) return new SecretBox(settings.secretsKey);
    if (settings.keyRequired)
      throw new Error(
        "PLATFORM_SECRETS_KEY is not set: in a cluster every gateway and scaler must share it (openssl rand -base64 32 into the platform-secrets Secret, deploy/base/secret.example.yaml)",
      );
    const file = settings.secretsKeyFile;
    await mkdir(dirname(file), { recursive: true });
    try {
      // "wx": two processes starting at once never both write a key; the loser reads the winner's.
      await writeFile(file, randomBytes(32).toString("base64"), { flag: "wx", mode: 0o600 });
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
    }
    await chmod(file, 0o600);
    const key = Buffer.from((await readFile(file, "utf8")).trim(), "base64");
    if (key.length !== 32)
      throw new Error(
        `the secrets key file ${file} does not hold 32 bytes of base64; restore it from a backup (secrets sealed with it cannot be opened otherwise)`,
      );
    return new SecretBox(key);
  }

  /** For tests and tools that hold the key themselves. */
  static fromKey(key: Buffer): SecretBox {
    if (key.length !== 32) throw new Error("a secrets key is 32 bytes");
    return new SecretBox(key);
  }

  seal(value: string, context: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv("aes-256-gcm", this.key, iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.from(context));
    const sealed = Buffer.concat([cipher.update(value, "utf8"), cipher.final()]);
    return [VERSION, iv, cipher.getAuthTag(), sealed]
      .map((p) => (typeof p === "string" ? p : p.toString("base64url")))
      .join(".");
  }

  open(sealed: string, context: string): string {
    const [version, iv, tag, data] = sealed.split(".");
    if (version !== VERSION || !iv || !tag || data === undefined)
      throw new Error(`a sealed secret (${context}) is not in the ${VERSION} form`);
    try {
      // The tag's length is pinned: GCM checks only as many bytes as it is given, so a truncated
      // tag (a few bytes, guessable) would otherwise be accepted.
      const tagBytes = Buffer.from(tag, "base64url");
      if (tagBytes.length !== TAG_BYTES) throw new Error("truncated tag");
      const decipher = createDecipheriv("aes-256-gcm", this.key, Buffer.from(iv, "base64url"), {
        authTagLength: TAG_BYTES,
      });
      decipher.setAAD(Buffer.from(context));
      decipher.setAuthTag(tagBytes);
      return Buffer.concat([decipher.update(Buffer.from(data, "base64url")), decipher.final()]).toString("utf8");
    } catch {
      throw new Error(
        `the secret ${context} does not open with this platform's key (PLATFORM_SECRETS_KEY or the data directory's secrets.key changed?); set it again`,
      );
    }
  }
}

/** The additional data a secret is sealed with. */
export const secretContext = (org: string, name: string, key: string) => `${org}/${name}/${key}`;
