/** Failed-job reasons, read one way for online requests and batch records alike (src/queue/failures.ts). */
import { describe, expect, it } from "vitest";
import { jobErrorFromFailure } from "../../src/queue/failures.ts";

describe("a failed job's reason", () => {
  it("is the worker's JobError when it is one", () => {
    const error = { code: "context_length_exceeded", status: 400, param: "prompt", message: "too long" };
    expect(jobErrorFromFailure(JSON.stringify(error))).toEqual(error);
  });

  it("is replica_lost when BullMQ failed the job at its stall limit", () => {
    expect(jobErrorFromFailure("job stalled more than allowable limit")).toMatchObject({
      status: 502,
      code: "replica_lost",
    });
  });

  it("is job_failed for any other text, JSON that is no JobError included", () => {
    expect(jobErrorFromFailure("Missing lock for job 1")).toMatchObject({
      status: 500,
      code: "job_failed",
      message: "the request failed: Missing lock for job 1",
    });
    expect(jobErrorFromFailure('{"oops":1}')).toMatchObject({ status: 500, code: "job_failed" });
  });
});
