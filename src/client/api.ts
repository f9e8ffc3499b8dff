/**
 * The platform's management API client, as the CLI commands share it: it finds the platform and its
 * credential (credentials.ts), refreshes an expiring CLI token before a request (saving the new
 * pair), and turns a session that cannot be refreshed into one line telling the user to sign in again.
 */
import type { Readable } from "node:stream";
import { type CliSettings, loadCliSettings } from "../settings/cli.ts";
import { reach } from "../process/reach.ts";
import { type Credentials, resolveCredentials, updateCredentials } from "./credentials.ts";
import { CommandError } from "../process/command-error.ts";

/** A token this close to its expiry is refreshed first, so it does not expire on the way. */
const REFRESH_MARGIN_MS = 60_000;

type ErrorBody = { error?: { message?: string; code?: string } };

export class ApiClient {
  private creds: Credentials;
  private readonly cli: CliSettings;

  constructor(creds: Credentials, cli: CliSettings = loadCliSettings()) {
    this.creds = creds;
    this.cli = cli;
  }

  /** `baseUrl`: the registry to use (default: the workspace's, PLATFORM_BASE_URL, the file's default). */
  static async fromCredentials(baseUrl?: string): Promise<ApiClient> {
    const cli = loadCliSettings();
    return new ApiClient(await resolveCredentials(cli, baseUrl), cli);
  }

  get baseUrl(): string {
    return this.creds.base_url;
  }

  /** The bearer to send now: the API key, or a token refreshed first when it is about to expire. */
  async bearer(): Promise<string> {
    if (this.creds.api_key && !this.creds.token) return this.creds.api_key;
    const expires = this.creds.expires ? Date.parse(this.creds.expires) : Number.POSITIVE_INFINITY;
    if (expires - REFRESH_MARGIN_MS <= Date.now()) await this.refresh();
    return this.creds.token as string;
  }

  private sessionExpired(): CommandError {
    return new CommandError(`session expired for ${this.creds.base_url}: run platform auth login`, 1, { plain: true });
  }

  /**
   * Trades the refresh token for a new pair and saves it, under the credentials file's lock: a
   * command that refreshed meanwhile has saved a newer pair, which is taken instead, since
   * presenting a spent refresh token again would end the session.
   */
  private async refresh(): Promise<void> {
    const { base_url: url, token: spent } = this.creds;
    this.creds = await updateCredentials(async (file) => {
      const saved = file.registries[url];
      if (saved?.token && saved.token !== spent && Date.parse(saved.expires ?? "") - REFRESH_MARGIN_MS > Date.now())
        return { base_url: url, ...saved };
      const refreshToken = saved?.refresh_token ?? this.creds.refresh_token;
      if (!refreshToken) throw this.sessionExpired();
      const res = await this.fetch(`${url}/admin/v1/tokens/refresh`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ refresh_token: refreshToken }),
      });
      if (res.status === 401) throw this.sessionExpired();
      const grant = await this.finish<{ token: string; refresh_token: string; expires: number }>(
        "POST",
        "/admin/v1/tokens/refresh",
        res,
      );
      const entry = {
        token: grant.token,
        refresh_token: grant.refresh_token,
        expires: new Date(grant.expires).toISOString(),
      };
      file.registries[url] = entry;
      return { base_url: url, ...entry };
    }, this.cli);
  }

  private fetch(url: string, init: RequestInit): Promise<Response> {
    return reach(this.creds.base_url, url, init);
  }

  /**
   * `init` sent with the bearer. A 401 `token_expired` is retried once after a refresh when the
   * body can be sent again (a stream cannot); otherwise, or if that fails too, the session is over.
   */
  async send(
    method: string,
    path: string,
    init: Omit<RequestInit, "method"> = {},
    replayable = true,
  ): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      const bearer = await this.bearer();
      const res = await this.fetch(`${this.creds.base_url}${path}`, {
        ...init,
        method,
        headers: { ...(init.headers as Record<string, string>), authorization: `Bearer ${bearer}` },
      });
      if (res.status !== 401 || !this.creds.token) return res;
      const code = (
        (await res
          .clone()
          .json()
          .catch(() => ({}))) as ErrorBody
      ).error?.code;
      if (code !== "token_expired") return res;
      if (attempt > 0 || !replayable) throw this.sessionExpired();
      // Revoked or expired early (a clock ahead of the server's): one refresh, then give up.
      this.creds = { ...this.creds, expires: new Date(0).toISOString() };
    }
  }

  /** `uploadType`: the upload's content type (default application/octet-stream). */
  async request<T>(
    method: string,
    path: string,
    body?: unknown,
    upload?: Readable,
    uploadType = "application/octet-stream",
  ): Promise<T> {
    const headers: Record<string, string> = {};
    let payload: RequestInit["body"];
    if (upload) {
      headers["content-type"] = uploadType;
      payload = upload as unknown as RequestInit["body"];
    } else if (body !== undefined) {
      headers["content-type"] = "application/json";
      payload = JSON.stringify(body);
    }
    const res = await this.send(
      method,
      path,
      { headers, body: payload, ...(upload ? { duplex: "half" } : {}) } as RequestInit,
      !upload,
    );
    return this.finish<T>(method, path, res);
  }

  /**
   * A request the server may answer with NDJSON progress lines (`{"progress"}`
   * ... then `{"result"}` or `{"error"}`) or, when there was nothing to wait
   * for, a plain JSON body.
   */
  async requestWithProgress<T>(
    method: string,
    path: string,
    body: unknown,
    onProgress: (p: { received: number; total: number | null }) => void,
  ): Promise<T> {
    const res = await this.send(method, path, {
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!res.headers.get("content-type")?.startsWith("application/x-ndjson") || !res.body)
      return this.finish<T>(method, path, res);
    let buffered = "";
    let outcome: { result?: T; error?: { message?: string; code?: string } } | undefined;
    const handle = (text: string) => {
      if (text.trim() === "") return;
      const line = JSON.parse(text) as {
        progress?: { received: number; total: number | null };
        result?: T;
        error?: { message?: string; code?: string };
      };
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
    if (outcome?.error)
      throw new CommandError(
        `${outcome.error.message ?? "the operation failed"}${outcome.error.code ? ` (${outcome.error.code})` : ""}`,
      );
    if (!outcome || outcome.result === undefined)
      throw new CommandError(`${method} ${path}: the connection closed before the server sent a result`);
    return outcome.result;
  }

  private async finish<T>(method: string, path: string, res: Response): Promise<T> {
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : {};
    } catch {
      throw new CommandError(`${method} ${path}: HTTP ${res.status} with a non-JSON body: ${text.slice(0, 200)}`);
    }
    if (!res.ok) {
      const err = (json as ErrorBody).error;
      throw new CommandError(`${err?.message ?? `HTTP ${res.status}`}${err?.code ? ` (${err.code})` : ""}`);
    }
    return json as T;
  }
}
