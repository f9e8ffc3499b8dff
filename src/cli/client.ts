/** The management API client the CLI commands share. */
import type { Readable } from "node:stream";
import { CliError } from "./errors.ts";
import { type Credentials, resolveCredentials } from "./credentials.ts";

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

  /** `uploadType`: the upload's content type (default application/octet-stream). */
  async request<T>(method: string, path: string, body?: unknown, upload?: Readable, uploadType = "application/octet-stream"): Promise<T> {
    const url = `${this.creds.base_url}${path}`;
    const headers: Record<string, string> = { authorization: `Bearer ${this.creds.api_key}` };
    let payload: RequestInit["body"];
    if (upload) {
      headers["content-type"] = uploadType;
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
    return this.finish<T>(method, path, res);
  }

  /**
   * A request the server may answer with NDJSON progress lines (`{"progress"}`
   * ... then `{"result"}` or `{"error"}`) or, when there was nothing to wait
   * for, a plain JSON body.
   */
  async requestWithProgress<T>(method: string, path: string, body: unknown, onProgress: (p: { received: number; total: number | null }) => void): Promise<T> {
    const url = `${this.creds.base_url}${path}`;
    let res: Response;
    try {
      res = await fetch(url, { method, headers: { authorization: `Bearer ${this.creds.api_key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    } catch (e) {
      const cause = (e as { cause?: { code?: string } }).cause?.code ?? (e as Error).message;
      throw new CliError(`cannot reach the platform at ${this.creds.base_url} (${cause}). Is \`platform up\` running?`);
    }
    if (!res.headers.get("content-type")?.startsWith("application/x-ndjson") || !res.body) return this.finish<T>(method, path, res);
    let buffered = "";
    let outcome: { result?: T; error?: { message?: string; code?: string } } | undefined;
    const handle = (text: string) => {
      if (text.trim() === "") return;
      const line = JSON.parse(text) as { progress?: { received: number; total: number | null }; result?: T; error?: { message?: string; code?: string } };
      if (line.progress) onProgress(line.progress);
      else outcome = line;
    };
    for await (const chunk of res.body.pipeThrough(new TextDecoderStream())) {
      buffered += chunk;
      const lines = buffered.split("\n");
      buffered = lines.pop() ?? "";
      lines.forEach(handle);
    }
    handle(buffered);
    if (outcome?.error) throw new CliError(`${outcome.error.message ?? "the operation failed"}${outcome.error.code ? ` (${outcome.error.code})` : ""}`);
    if (!outcome || outcome.result === undefined) throw new CliError(`${method} ${path}: the connection closed before the server sent a result`);
    return outcome.result;
  }

  private async finish<T>(method: string, path: string, res: Response): Promise<T> {
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
