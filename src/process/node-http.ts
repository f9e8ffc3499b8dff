/**
 * node:http without undici. An ESM import of node:http reads every export, and Node's lazy
 * `WebSocket`, `CloseEvent` and `MessageEvent` getters on it then load undici (Node's fetch):
 * its 760 KB of source and the code compiled from it, about 2 MiB resident in a worker that
 * never uses it (docs/performance.md). The CommonJS module `process.getBuiltinModule` hands
 * over leaves those getters alone. Types still come from `import type { ... } from "node:http"`,
 * which loads nothing.
 */
export const http = process.getBuiltinModule("node:http");
