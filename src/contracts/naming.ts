/**
 * Names in Redis: one key prefix for everything the platform owns, one BullMQ
 * queue per model and version. Producers outside the platform use these too.
 */

/** BullMQ forbids ":" in queue names, hence "@". */
export function queueName(model: string, version: string): string {
  return `${model}@${version}`;
}

/** Control-plane keys, all under `<prefix>:cp:`. */
export function controlKeys(prefix: string) {
  const cp = `${prefix}:cp`;
  return {
    models: `${cp}:models`, // set of model names
    modelVersions: (name: string) => `${cp}:model:${name}:versions`, // hash version -> record JSON
    modelCounter: (name: string) => `${cp}:model:${name}:counter`,
    endpoints: `${cp}:endpoints`, // hash name -> record JSON
    endpointEvents: `${cp}:endpoint-events`, // pub/sub: endpoint changed
    replicas: (endpoint: string) => `${cp}:replicas:${endpoint}`, // zset replicaId -> heartbeat ms
    replica: (id: string) => `${cp}:replica:${id}`, // string JSON with TTL
    servedOnce: (endpoint: string) => `${cp}:served-once:${endpoint}`, // set when a replica of the deployed version first became ready
    apiKeys: `${cp}:apikeys`, // hash id -> record JSON
    apiKeyByHash: `${cp}:apikey-hashes`, // hash sha256 -> id
    bootstrapKey: `${cp}:bootstrap-admin`, // string: sha256 of the operator's bootstrap admin key (`platform keys bootstrap`)
    cancelChannel: `${cp}:cancel`,
    cancelled: (jobId: string) => `${cp}:cancelled:${jobId}`,
    replyStream: (gatewayId: string) => `${cp}:replies:${gatewayId}`,
    autoscaling: (endpoint: string) => `${cp}:autoscaling:${endpoint}`, // string JSON: the autoscaling block, document form
    scalingHistory: (endpoint: string) => `${cp}:scaling-history:${endpoint}`, // string JSON: the policy's ScalingHistory
    scalingDecisions: (endpoint: string) => `${cp}:scaling-decisions:${endpoint}`, // list of decision JSON, newest first, capped
    scalingDecisionCounts: `${cp}:scaling-decision-counts`, // hash "<endpoint>\t<action>" -> decisions made (metric)
    scalerLease: `${cp}:scaler-lease`, // string with TTL: the active scaler's token
    scalerWakeup: `${cp}:scaler-wakeup`, // pub/sub: a request waits on an endpoint with 0 replicas
    batches: `${cp}:batches`, // zset batch job id -> created ms
    batch: (id: string) => `${cp}:batch:${id}`, // hash: the batch job record, one field per part (see src/batch/records.ts)
    batchCheckpoint: (id: string) => `${cp}:batch:${id}:checkpoint`, // string JSON: where the next batch starts
    batchResults: (id: string) => `${cp}:batch:${id}:results`, // hash line number -> record outcome, for batches not yet written
    batchReplies: (id: string) => `${cp}:batch:${id}:replies`, // stream: workers' events for this job's records
    files: `${cp}:files`, // hash file id -> record JSON (OpenAI-style /v1/files; bytes in the artifact store)
  };
}
export type ControlKeys = ReturnType<typeof controlKeys>;
