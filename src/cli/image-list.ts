/**
 * `platform images list [--service <name>] [--json]`: the images published in your organization
 * (docs/publish.md, "Image records"), newest first: what the dev center can deploy.
 */
import type { Command } from "commander";
import { ImageServiceName } from "../container-images/names.ts";
import type { ImageRecord } from "../container-images/record.ts";
import { ApiClient } from "../client/api.ts";
import { CliError } from "./common/errors.ts";
import { printJson, printTable } from "./common/output.ts";

const time = (seconds: number) => new Date(seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z");

export function registerImages(program: Command): void {
  const images = program.command("images").description("service images published with `platform publish`");
  images
    .command("list")
    .description("your organization's published images, newest first")
    .option("--service <name>", "only this service's")
    .option("--json", "print JSON")
    .action(async (opts: { service?: string; json?: boolean }) => {
      let query = "";
      if (opts.service !== undefined) {
        const name = ImageServiceName.safeParse(opts.service);
        if (!name.success) throw new CliError(`--service: ${name.error.issues[0]?.message}`, 2);
        query = `?service=${encodeURIComponent(name.data)}`;
      }
      const api = await ApiClient.fromCredentials();
      const { data } = await api.request<{ data: ImageRecord[] }>("GET", `/admin/v1/images${query}`);
      if (opts.json) return printJson(data);
      printTable(
        ["SERVICE", "TAG", "DIGEST", "PROTOS", "PUBLISHED", "BY"],
        data.map((r) => [
          r.service,
          r.tag,
          `${r.digest.slice(0, 19)}…`,
          r.protos.map((p) => `${p.package}@${p.version}`).join(", ") || "-",
          time(r.created),
          r.published_by.name,
        ]),
      );
    });
}
