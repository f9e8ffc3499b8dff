/**
 * The version `platform publish` tags an image with (src/publish/source.ts): package.json's, or
 * pyproject.toml's `[project].version` read with a TOML parser, whatever form the table takes.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { versionOf } from "../../src/publish/source.ts";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "platform-version-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const pyproject = (text: string) => writeFile(join(dir, "pyproject.toml"), text);

describe("versionOf", () => {
  it("pyproject.toml: [project].version, whatever else the file holds", async () => {
    await pyproject(`[tool.other]
version = "9.9.9"

[project]
name = "items"
dependencies = [
  "grpcio==1.66.1",
]
version = "1.3.0"  # released

[project.urls]
Home = "https://example.com"
`);
    expect(await versionOf(dir, "python")).toEqual({ version: "1.3.0", file: join(dir, "pyproject.toml") });
  });

  it("pyproject.toml: an inline [project] table, and a literal string", async () => {
    await pyproject(`project = { name = "items", version = '2.0.1' }\n`);
    expect((await versionOf(dir, "python")).version).toBe("2.0.1");
  });

  it("pyproject.toml: no version, a dynamic one, or not TOML: an error naming the file", async () => {
    await pyproject(`[project]\nname = "items"\ndynamic = ["version"]\n`);
    await expect(versionOf(dir, "python")).rejects.toThrow(
      `${join(dir, "pyproject.toml")}: no version in [project] (a dynamic version is not read)`,
    );
    await pyproject(`[project\nversion = "1"\n`);
    await expect(versionOf(dir, "python")).rejects.toThrow(`${join(dir, "pyproject.toml")}: not valid TOML`);
  });

  it("the language's file first; a version that cannot be part of a tag is refused", async () => {
    await pyproject(`[project]\nversion = "1.0.0"\n`);
    await writeFile(join(dir, "package.json"), JSON.stringify({ version: "3.0.0+build" }));
    expect((await versionOf(dir, "python")).version).toBe("1.0.0");
    await expect(versionOf(dir, "node")).rejects.toThrow('version "3.0.0+build" cannot be part of an image tag');
  });
});
