/** Which paths of a checkpoint directory the registry takes: top-level files and sentence-transformers modules' config.json, nothing that escapes. */
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  checkEntryName,
  isCheckpointFile,
  isModuleDirectory,
  manifestDigest,
  uploadedEntryName,
} from "../../src/models/checkpoint.ts";

describe("checkpoint file names", () => {
  it("takes top-level checkpoint files, sentence-transformers' files and a module's <n>_<Name>/config.json", () => {
    for (const p of [
      "config.json",
      "model-00001-of-00002.safetensors",
      "modules.json",
      "sentence_bert_config.json",
      "config_sentence_transformers.json",
      "1_Pooling/config.json",
      "2_Normalize/config.json",
      "10_Dense/config.json",
    ]) {
      expect(isCheckpointFile(p), p).toBe(true);
    }
    for (const p of [
      "README.md",
      "pytorch_model.bin",
      "1_Pooling/notes.txt",
      "original/config.json",
      "1_Pooling/sub/config.json",
      "_Pooling/config.json",
      "1_/config.json",
      "1234_Pooling/config.json",
      "1_Pool.ing/config.json",
      ".1_Pooling/config.json",
      "1_Pooling/config.json/x",
      "../config.json",
      "1_Pooling/../config.json",
    ]) {
      expect(isCheckpointFile(p), p).toBe(false);
    }
    expect(isModuleDirectory("1_Pooling")).toBe(true);
    expect(isModuleDirectory("..")).toBe(false);
    expect(isModuleDirectory("1_Pooling/..")).toBe(false);
  });

  it("an upload's entry: kept, skipped (another subdirectory's file) or refused (escapes), by the same rules", () => {
    expect(uploadedEntryName("./1_Pooling/config.json")).toBe("1_Pooling/config.json");
    expect(uploadedEntryName("./config.json")).toBe("config.json");
    expect(uploadedEntryName("./1_Pooling/notes.txt")).toBeUndefined();
    expect(uploadedEntryName("original/config.json")).toBeUndefined();
    expect(() => uploadedEntryName("1_Pooling/../../x.json")).toThrow(/climbs out/);
    expect(() => uploadedEntryName("/1_Pooling/config.json")).toThrow(/absolute path/);
    // A stored record's paths are checked again on a worker: only a module's config.json may have a slash.
    expect(checkEntryName("1_Pooling/config.json")).toBe("1_Pooling/config.json");
    expect(() => checkEntryName("original/config.json")).toThrow(/is in a subdirectory/);
  });

  it("the digest is what `sha256sum` prints for the files, module paths included, in byte order", () => {
    const files = [
      { path: "config.json", size: 2, sha256: "a".repeat(64) },
      { path: "1_Pooling/config.json", size: 2, sha256: "b".repeat(64) },
    ];
    const lines = `${"b".repeat(64)}  1_Pooling/config.json\n${"a".repeat(64)}  config.json\n`;
    expect(manifestDigest(files)).toBe(createHash("sha256").update(lines).digest("hex"));
  });
});
