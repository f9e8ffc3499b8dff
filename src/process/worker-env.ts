/**
 * How a worker process is started, whatever starts it (`platform up`, the local or the Kubernetes
 * backend): its health port, Node flags and allocator settings. The vLLM server a worker starts
 * is a process of another kind and gets none of these.
 */

/** The port a worker serves /livez, /readyz and /metrics on in a pod. */
export const WORKER_HEALTH_PORT = 8081;
/**
 * Node flags for worker processes. V8 grows the young generation to 16 MiB semi-spaces under the
 * allocation of token streaming and keeps it: ~100 MiB of heap for ~35 MiB of live objects.
 * 4 MiB semi-spaces keep a replica ~35 MiB smaller for more, cheap, scavenges (docs/performance.md).
 */
export const WORKER_NODE_FLAGS = ["--max-semi-space-size=4"] as const;
/**
 * glibc malloc settings for worker processes. By default glibc gives each thread that contends
 * for the allocator an arena of its own (V8's compiler and GC threads, libuv's pool, llama.cpp's
 * threads: 6–8 in a worker), keeps what is freed inside each, and raises its mmap and trim
 * thresholds after large frees, so what they free stays resident (a worker after a busy spell:
 * ~39 MiB in 7 arenas). One arena and fixed 128 KiB thresholds keep a replica ~12 MiB smaller
 * (docs/performance.md, "RSS"); llama.cpp allocates its buffers up front, so its threads do not
 * contend for the one arena while generating (tokens/s unchanged). A variable already set in the
 * environment wins; the vLLM server a worker starts does not inherit these (workers/engines/vllm.ts).
 */
export const WORKER_ALLOCATOR_ENV: Readonly<Record<string, string>> = {
  MALLOC_ARENA_MAX: "1",
  MALLOC_MMAP_THRESHOLD_: "131072",
  MALLOC_TRIM_THRESHOLD_: "131072",
};

/** `env` with WORKER_ALLOCATOR_ENV's variables added where it does not set them. */
export function withWorkerAllocator(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...WORKER_ALLOCATOR_ENV, ...env };
}

/** `env` without the variables WORKER_ALLOCATOR_ENV put there (those with its values), for a process of another kind. */
export function withoutWorkerAllocator(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name, value]) => WORKER_ALLOCATOR_ENV[name] !== value));
}
