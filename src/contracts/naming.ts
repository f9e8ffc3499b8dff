/**
 * Names in Redis: one key prefix for everything the platform owns, one BullMQ
 * queue per model and version. Producers outside the platform use these too.
 *
 * The layout is Redis Cluster's: a MULTI, a script or a multi-key command runs
 * there only if all its keys hash to one slot, and a `{...}` hash tag in a name
 * makes only the tag count. Keys used together share a tag: a queue's keys its
 * name `{<model>@<version>}` (BullMQ's scripts), the control-plane records
 * `{cp}` (a record and its index change together), a batch job's working keys
 * its id, an API key's rate-limit state its id, the usage counters `{usage}`,
 * the sign-in flows and codes `{signin}`.
 * Keys always used alone (reply streams, cancel marks) have none: hashed
 * whole, they spread over the nodes, as different queues and batches do.
 * Every key still starts with `<prefix>:`; on one Redis or Sentinel the braces
 * are just part of the names.
 */

/**
 * BullMQ forbids ":" in queue names, hence "@"; the braces are the queue's hash tag. `variant`:
 * engine settings that change answers (servingVariant in engines.ts); none for the default queue
 * that producers address (docs/queue-contract.md).
 */
export function queueName(model: string, version: string, variant = ""): string {
  return variant === "" ? `{${model}@${version}}` : `{${model}@${version}~${variant}}`;
}

/** The batch coordinators' BullMQ queue (another one, e.g. a test's, needs a hash tag of its own on a Cluster). */
export const COORDINATOR_QUEUE = "{batches}";

/** The evaluation coordinators' BullMQ queue (src/evaluation/coordinator.ts). */
export const EVALUATION_QUEUE = "{evaluations}";
/** The trainers' BullMQ queue: fine-tuning jobs (src/finetuning, workers/trainer). */
export const FINE_TUNING_QUEUE = "{fine-tuning}";

/**
 * Where jobs that ask for a GPU (`resources.gpu`) wait: only trainers that offer one (`platform
 * trainer --gpu`) read it, so a GPU job never lands on a CPU-only trainer. Same hash tag as the queue.
 */
export function gpuQueueOf(queue: string): string {
  return `${queue}-gpu`;
}

/** Control-plane keys: records under `<prefix>:{cp}:` (one slot), the rest under `<prefix>:cp:`. */
export function controlKeys(prefix: string) {
  const cp = `${prefix}:{cp}`;
  const plain = `${prefix}:cp`;
  const signin = `${prefix}:{signin}`;
  return {
    models: `${cp}:models`, // set of model names
    modelVersions: (name: string) => `${cp}:model:${name}:versions`, // hash version -> record JSON
    modelCounter: (name: string) => `${cp}:model:${name}:counter`,
    modelOwners: `${cp}:model-owners`, // hash model name -> organization that made it (src/models/owners.ts); absent: the operator's
    endpoints: `${cp}:endpoints`, // hash name -> record JSON
    endpointEvents: `${plain}:endpoint-events`, // pub/sub: endpoint changed (a channel, not a key: no slot)
    replicas: (endpoint: string) => `${cp}:replicas:${endpoint}`, // zset replicaId -> heartbeat ms
    replica: (id: string) => `${cp}:replica:${id}`, // string JSON with TTL
    servedOnce: (endpoint: string) => `${cp}:served-once:${endpoint}`, // set when a replica of the deployed version first became ready
    apiKeys: `${cp}:apikeys`, // hash id -> record JSON
    apiKeyByHash: `${cp}:apikey-hashes`, // hash sha256 -> id
    bootstrapKey: `${cp}:bootstrap-admin`, // string: sha256 of the operator's bootstrap admin key (`platform keys bootstrap`)
    orgs: `${cp}:orgs`, // hash organization id -> record JSON (`default` is never stored: src/orgs/store.ts)
    orgLimits: `${cp}:org-limits`, // hash organization id -> traffic limits JSON an operator set (src/ratelimit/org-limits.ts)
    users: `${cp}:users`, // hash user id -> record JSON (people signed in through an identity provider, src/users/)
    userByIdentity: `${cp}:user-identities`, // hash "<issuer>\n<subject>" -> user id
    callerEvents: `${plain}:caller-events`, // pub/sub: a key, token or user was revoked or changed ("key:<id>", "token:<id>", "user:<id>": ids only, src/keys/changes.ts)
    // CLI tokens (src/tokens/store.ts): every key expires with what it describes, so nothing grows.
    token: (id: string) => `${cp}:token:${id}`, // hash: one session (its access and refresh token hashes), TTL: its end
    tokenAccess: (sha256: string) => `${cp}:token-access:${sha256}`, // string -> session id, TTL: the access token's expiry
    tokenRefresh: (sha256: string) => `${cp}:token-refresh:${sha256}`, // string -> session id, or "used:<id>" once rotated; TTL: the session's end
    tokensOfOrg: (org: string) => `${cp}:tokens-org:${org}`, // zset session id -> end ms; trimmed on write, expires with its last
    tokensOfSubject: (subject: string) => `${cp}:tokens-subject:${subject}`, // zset as above, per "<key|user>:<id>"
    // The proto catalog (src/protos/): per organization, so another's packages are not even addressable.
    protoPackages: (org: string) => `${cp}:proto-packages:${org}`, // hash package -> summary JSON (latest, count, times)
    protoVersions: (orgPackage: string) => `${cp}:proto-versions:${orgPackage}`, // "<org>/<package>": hash version -> record JSON; objects under protos/<org>/<package>/<version>/
    // Published service images (src/container-images/): per organization, bounded (src/container-images/store.ts).
    images: (org: string) => `${cp}:images:${org}`, // hash "<service>:<tag>" -> record JSON
    registryCredentials: (org: string) => `${cp}:pull-credentials:${org}`, // (the key keeps its first name) hash registry host -> entry JSON (username, sealed password, who, when): src/registry-credentials/
    // Deployed services (src/services/): per organization; "<org>/<name>" names one service's keys.
    services: `${cp}:services`, // hash "<org>/<name>" -> record JSON (every organization's: the reconciler reads them all)
    serviceRollouts: (orgName: string) => `${cp}:service-rollouts:${orgName}`, // hash rollout id -> rollout JSON, the latest MAX_ROLLOUTS_KEPT
    serviceEnv: (orgName: string) => `${cp}:service-env:${orgName}`, // hash variable -> entry JSON (value, version, who, when)
    serviceSecrets: (orgName: string) => `${cp}:service-secrets:${orgName}`, // hash secret -> entry JSON (sealed value, version, who, when)
    serviceRelease: (orgName: string, revision: string) => `${cp}:service-release:${orgName}/${revision}`, // string JSON: the env and sealed secrets a rollout started with
    serviceReplicas: (orgName: string) => `${cp}:service-replicas:${orgName}`, // hash replica id -> replica JSON (the backend's report)
    serviceLogs: (orgName: string) => `${plain}:service-logs:{${orgName}}`, // stream: replicas' output lines, capped
    serviceEvents: `${plain}:service-events`, // pub/sub: a service record or its replicas changed ("<org>/<name>")
    // Sign-in (src/signin/): every key lives minutes at most; secrets (flow cookies, codes) are named by their SHA-256.
    signinFlow: (sha256: string) => `${signin}:flow:${sha256}`, // hash: one browser's sign-in in progress, TTL 10 min
    signinOpen: `${signin}:open`, // zset "<kind>:<sha256>" -> expiry ms: caps the flows and device codes open at once
    signinOpensBy: (bucket: string, minute: string) => `${signin}:opens:${bucket}:${minute}`, // counter, TTL 2 min: sign-ins one client address opened this minute
    authCode: (sha256: string) => `${signin}:code:${sha256}`, // hash: what an authorization code is bound to, TTL 60 s
    deviceCode: (sha256: string) => `${signin}:device:${sha256}`, // hash: a device authorization (RFC 8628), TTL its life + 1 min
    userCode: (sha256: string) => `${signin}:user-code:${sha256}`, // string -> its device code's SHA-256, until approved or denied
    cancelChannel: `${plain}:cancel`, // pub/sub
    cancelled: (jobId: string) => `${plain}:cancelled:${jobId}`, // string with TTL
    imageUrl: (id: string) => `${plain}:image-url:${id}`, // string JSON with TTL: a generated image a `url` answer names (src/pictures/)
    replyStream: (gatewayId: string) => `${plain}:replies:${gatewayId}`, // stream: workers' events for this gateway's jobs
    autoscaling: (endpoint: string) => `${cp}:autoscaling:${endpoint}`, // string JSON: the parsed autoscaling settings (src/autoscaling/store.ts)
    scalingHistory: (endpoint: string) => `${cp}:scaling-history:${endpoint}`, // string JSON: the policy's ScalingHistory
    scalingDecisions: (endpoint: string) => `${cp}:scaling-decisions:${endpoint}`, // list of decision JSON, newest first, capped
    scalingDecisionCounts: `${cp}:scaling-decision-counts`, // hash "<endpoint>\t<action>" -> decisions made (metric)
    scalerLease: `${cp}:scaler-lease`, // string with TTL: the active scaler's token
    scalerWakeup: `${plain}:scaler-wakeup`, // pub/sub: a request waits on an endpoint with 0 replicas
    abTests: `${cp}:abtests`, // hash endpoint -> A/B test record JSON
    abStats: (endpoint: string) => `${cp}:abstats:${endpoint}`, // hash "<version>\t<counter>" -> count, since the test started
    batches: `${cp}:batches`, // zset batch job id -> created ms
    batch: (id: string) => `${cp}:batch:${id}`, // hash: the batch job record, one field per part (see src/batch/store.ts)
    batchCheckpoint: (id: string) => `${plain}:batch:{${id}}:checkpoint`, // string JSON: where the next batch starts
    batchResults: (id: string) => `${plain}:batch:{${id}}:results`, // hash line number -> record outcome, for batches not yet written
    batchReplies: (id: string) => `${plain}:batch:{${id}}:replies`, // stream: workers' events for this job's records
    // Evaluation jobs (src/evaluation/): records bounded per organization, results per evaluated version or adapter.
    evaluations: (org: string) => `${cp}:evaluations:${org}`, // zset evaluation id -> created ms (trimmed: src/evaluation/store.ts)
    evaluation: (id: string) => `${cp}:evaluation:${id}`, // string JSON: the evaluation job record
    evaluationResults: (target: string) => `${cp}:evaluation-results:${target}`, // hash "<org>\t<metric>" -> latest result JSON; target "<model>@<version>" or an adapter's "<name>@<version>"
    evaluationTargets: `${cp}:evaluation-targets`, // set of targets that have results (for listings)
    evaluationScores: (id: string) => `${plain}:evaluation:{${id}}:scores`, // hash item index -> score JSON (per-item, for resuming and comparisons)
    evaluationReplies: (id: string) => `${plain}:evaluation:{${id}}:replies`, // stream workers append to (unread: answers are kept on the model jobs)
    // Fine-tuning jobs (src/finetuning/store.ts): per organization, bounded; events a capped stream per job.
    fineTuningJobs: (org: string) => `${cp}:ftjobs:${org}`, // zset job id -> created ms
    fineTuningJob: (id: string) => `${cp}:ftjob:${id}`, // hash: the job record, one field per part
    fineTuningCheckpoints: (id: string) => `${cp}:ftjob:${id}:checkpoints`, // list of checkpoint JSON, newest first, capped
    fineTuningActive: (org: string) => `${cp}:ftactive:${org}`, // set of queued or running job ids (admission)
    fineTuningEvents: (id: string) => `${plain}:ftjob:{${id}}:events`, // stream: the job's events, capped
    // Stored responses (src/responses/store.ts), one slot per organization: `<this>:index` (zset id -> expiry ms),
    // `<this>:sizes` (hash id -> bytes), `<this>:r:<id>` (string JSON with TTL).
    responses: (org: string) => `${plain}:responses:{${org}}`,
    files: `${cp}:files`, // hash file id -> record JSON (OpenAI-style /v1/files; bytes in the artifact store)
    quantizeLock: (artifact: string) => `${plain}:quantize-lock:${artifact}`, // string with TTL: the replica quantizing "<sha256>:<type>" (src/models/quantized.ts)
    convertLock: (digest: string) => `${plain}:convert-lock:${digest}`, // string with TTL: the replica converting the checkpoint with this manifest digest to GGUF (src/models/converted.ts)
    // One API key's rate-limit state: `<this>:<scope>:<part>` (src/ratelimit/limiter.ts). In one slot, the key id
    // being the tag, since one script touches it all; different keys spread over the nodes.
    rateLimit: (keyId: string) => `${plain}:ratelimit:{${keyId}}`, // also "org:<id>": an organization's limits across its keys
    // Usage counters: `usage("m:<epoch s>")` / `usage("h:<epoch s>")`, one hash per minute or hour bucket
    // (src/usage/counters.ts). One slot, so a request's counters are one pipeline and a query one more.
    usage: (bucket: string) => `${plain}:{usage}:${bucket}`,
  };
}
export type ControlKeys = ReturnType<typeof controlKeys>;
