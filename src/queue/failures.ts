/**
 * Decoding a failed job's reason. A worker fails a job with its JobError as
 * JSON (and has already sent the same error on the reply stream); anything
 * else is BullMQ failing the job on its own, in plain text. The gateway hears
 * it on the queue's event stream, a batch job reads it from the job's hash.
 */
import { JobError } from "../contracts/job.ts";

export function jobErrorFromFailure(failedReason: string): JobError {
  try {
    const parsed = JobError.safeParse(JSON.parse(failedReason));
    if (parsed.success) return parsed.data;
  } catch {
    // not JSON: BullMQ's own reason
  }
  if (/stalled/i.test(failedReason)) {
    return {
      status: 502,
      code: "replica_lost",
      param: null,
      message: "the replicas serving this request stopped twice while running it; retry the request",
    };
  }
  return { status: 500, code: "job_failed", param: null, message: `the request failed: ${failedReason}` };
}
