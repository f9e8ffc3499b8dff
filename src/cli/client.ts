/** The management API client the CLI commands share. */
import type { Readable } from "node:stream";
import { CliError, type Credentials, resolveCredentials } from "./credentials.ts";

export class ApiClient {
  private readonly creds: Credentials;
  constructor(creds: Credentials) {
    this.creds = creds;
  }

  static async fromCredentials(): Promise<ApiClient> {
    return new ApiClient(await resolveCredentials());
  }

  get baseUrl(): string {
    return this.creds.base_url;
  }

  async request<T>(method: string, path: string, body?: unknown, upload?: Readable): Promise<T> {
    const url = `${this.creds.base_url}${path}`;
    const headers: Record<string, string> = { authorization: `Bearer ${this.creds.api_key}` };
    let payload: RequestInit["body"];
    if (upload) {
      headers["content-type"] = "application/octet-stream";
      payload = upload as unknown as RequestInit["body"];
    } else if (body !== undefined) {
      headers["content-type"] = "application/json";
      payload = JSON.stringify(body);
    }
    let res: Response;
    try {
      res = await fetch(url, { method, headers, body: payload, ...(upload ? { duplex: "half" } : {}) } as RequestInit);
    } catch (e) {
      const cause = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
      throw new CliError(`cannot reach the platform at ${this.creds.base_url} (${cause}). Is \`platform up\` running?`);
    }
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : {};
    } catch {
      throw new CliError(`${method} ${path}: HTTP ${res.status} with a non-JSON body: ${text.slice(0, 200)}`);
    }
    if (!res.ok) {
      const err = (json as { error?: { message?: string; code?: string } }).error;
      throw new CliError(`${err?.message ?? `HTTP ${res.status}`}${err?.code ? ` (${err.code})` : ""}`);
    }
    return json as T;
  }
}
