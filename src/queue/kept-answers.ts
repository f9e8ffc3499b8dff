/**
 * A batch record's answer, kept on its own model job until its batch has written it.
 *
 * BullMQ copies every return value into the queue's event stream (its last 10,000 events,
 * long outliving the job), so a batch record, like an online job, returns a receipt without
 * content. What resuming a batch needs (the answer of a record that finished while no
 * coordinator listened) goes in a field of the job's own hash instead: it is removed with the
 * job, which the batch removes once the part holding the record is written
 * (src/batch/record-jobs.ts).
 */
import type { Job } from "bullmq";
import type { JobResult } from "../contracts/job.ts";
import type { RedisClient } from "../redis/connection.ts";
import { LuaScript } from "../redis/scripts.ts";

/** The job hash's field that holds the answer (beside BullMQ's own `returnvalue`, `finishedOn`, ...). */
export const ANSWER_FIELD = "answer";

// Only onto a job that still exists (lua/keep-answer.lua).
const keep = new LuaScript(import.meta.url, "keep-answer");

export async function keepAnswer(redis: RedisClient, job: Job, result: JobResult): Promise<void> {
  // BullMQ's job key: `<prefix>:<queue>:<id>`, in the queue's hash slot.
  await keep.run(redis, [`${job.queueQualifiedName}:${job.id}`], [ANSWER_FIELD, JSON.stringify(result)]);
}
