/**
 * Writing a scaffold (src/scaffold/write.ts): all or nothing without --force, every existing
 * file named; --force replaces; no path leaves the workspace; executable files stay executable.
 */
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CliError } from "../../src/cli/common/errors.ts";
import { writeScaffold } from "../../src/scaffold/write.ts";

let root: string;
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "platform-scaffold-write-"));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const files = [
  { path: "package.json", content: "{}\n" },
  { path: "src/index.ts", content: "// entry\n" },
  { path: "bin/run.sh", content: "#!/bin/sh\n", executable: true },
];

describe("writeScaffold", () => {
  it("writes every file, directories included, keeping executables executable", async () => {
    const r = await writeScaffold(root, files, false);
    expect(r).toEqual({ written: ["package.json", "src/index.ts", "bin/run.sh"], replaced: [] });
    expect(await readFile(join(root, "src/index.ts"), "utf8")).toBe("// entry\n");
    expect((await stat(join(root, "bin/run.sh"))).mode & 0o111).not.toBe(0);
  });

  it("writes nothing when any file exists, naming each, unless forced", async () => {
    await writeFile(join(root, "package.json"), "mine\n");
    const err = await writeScaffold(root, files, false).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(CliError);
    expect((err as CliError).exitCode).toBe(1);
    expect((err as CliError).message).toBe(
      "1 of the scaffold's files already exists, nothing written: package.json; move them away, or pass --force to replace them",
    );
    await expect(stat(join(root, "src"))).rejects.toThrow();
    expect(await readFile(join(root, "package.json"), "utf8")).toBe("mine\n");

    const forced = await writeScaffold(root, files, true);
    expect(forced.replaced).toEqual(["package.json"]);
    expect(await readFile(join(root, "package.json"), "utf8")).toBe("{}\n");
  });

  it("refuses paths outside the workspace and a path given twice", async () => {
    await expect(writeScaffold(root, [{ path: "../escape", content: "" }], false)).rejects.toThrow(
      "scaffold file ../escape: outside the workspace",
    );
    await expect(writeScaffold(root, [{ path: "/etc/x", content: "" }], false)).rejects.toThrow(
      "outside the workspace",
    );
    await expect(
      writeScaffold(
        root,
        [
          { path: "a", content: "" },
          { path: "a", content: "" },
        ],
        false,
      ),
    ).rejects.toThrow("scaffold file a: given twice");
  });
});
