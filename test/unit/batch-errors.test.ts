/**
 * What batch job records and storage errors may tell a client, on their own:
 * no server path, storage endpoint or library text in the message; the detail
 * goes to the log instead (docs/security.md, "Error messages").
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { captureLogs } from "../helpers/logs.ts";
import type { BatchSpec } from "../../src/batch/store.ts";
import { showPaths } from "../../src/batch/store.ts";
import { fromFsError, fromS3Error } from "../../src/storage/errors.ts";

afterEach(() => {
  vi.restoreAllMocks();
});

const logged = () => captureLogs().text;

describe("file system errors", () => {
  it("name the code of an error they do not know, never Node's message with its path", () => {
    const error = Object.assign(
      new Error("EWEIRD: something odd happened, open '/srv/platform/secret/area/in.jsonl'"),
      { code: "EWEIRD" },
    );
    const read = fromFsError(error, "file:///data/in.jsonl", "read");
    expect(read.message).toBe("file:///data/in.jsonl: cannot read (EWEIRD: file system error)");
    const write = fromFsError(error, "file:///data/out.jsonl", "write");
    expect(write.message).toBe("file:///data/out.jsonl: cannot write (EWEIRD: file system error)");
  });

  it("describe the codes symbolic links and long names produce", () => {
    const loop = Object.assign(new Error("ELOOP: too many symbolic links encountered, open '/srv/x/loop'"), {
      code: "ELOOP",
    });
    expect(fromFsError(loop, "file:///data/loop", "read").message).toBe(
      "file:///data/loop: cannot read (ELOOP: too many levels of symbolic links)",
    );
  });

  it("say nothing of an error without a code but that it happened", () => {
    const message = fromFsError(new Error("weird failure at /srv/platform/secret"), "file:///data/x", "read").message;
    expect(message).toBe("file:///data/x: cannot read (file system error)");
  });
});

describe("S3 errors", () => {
  it("leave the endpoint out of an unreachable storage's message and log it", () => {
    const log = logged();
    const error = Object.assign(new Error("connect ECONNREFUSED 10.20.30.40:9000"), { code: "ECONNREFUSED" });
    const mapped = fromS3Error(error, "s3://bucket/in.jsonl", "bucket", "http://10.20.30.40:9000");
    expect(mapped.code).toBe("unavailable");
    expect(mapped.message).toBe("s3://bucket/in.jsonl: storage unavailable (ECONNREFUSED)");
    expect(log()).toMatch(/s3:\/\/bucket\/in\.jsonl.*http:\/\/10\.20\.30\.40:9000.*ECONNREFUSED/);
  });

  it("keep the SDK's own text of an unknown error out of the message and log it", () => {
    const log = logged();
    const error = Object.assign(
      new Error("The request to http://10.20.30.40:9000/bucket/in.jsonl was odd (request id 123)"),
      { name: "OddError" },
    );
    const mapped = fromS3Error(error, "s3://bucket/in.jsonl", "bucket", "http://10.20.30.40:9000");
    expect(mapped.message).toBe("s3://bucket/in.jsonl: storage request failed (OddError)");
    expect(log()).toMatch(/OddError.*10\.20\.30\.40/);
  });
});

describe("showPaths", () => {
  const spec = {
    shown: [
      ["file:///srv/platform/batch/key_0123456789ab/out/", "out/"],
      ["file:///srv/platform/batch/key_0123456789ab/my%20in.jsonl", "my in.jsonl"],
    ],
  } as unknown as BatchSpec;

  it("rewrites file:// URLs and the plain server paths they stand for", () => {
    expect(showPaths(spec, "file:///srv/platform/batch/key_0123456789ab/out/x.jsonl: cannot write")).toBe(
      "out/x.jsonl: cannot write",
    );
    expect(showPaths(spec, "cannot open /srv/platform/batch/key_0123456789ab/out/job.parts/part-000001.jsonl")).toBe(
      "cannot open out/job.parts/part-000001.jsonl",
    );
    expect(showPaths(spec, "/srv/platform/batch/key_0123456789ab/my in.jsonl changed")).toBe("my in.jsonl changed");
  });

  it("leaves other text alone", () => {
    expect(showPaths(spec, "GET /v1/batch-jobs/x/output")).toBe("GET /v1/batch-jobs/x/output");
  });
});
