/**
 * The standard gRPC health service (grpc.health.v1.Health: Check, List, Watch), which Kubernetes'
 * gRPC probes, grpc_health_probe and load balancers call. "" is the whole server; each RPC service
 * is listed by its full name. Everything is NOT_SERVING until the database is ready and again from
 * the moment shutdown starts, so traffic moves away before calls are refused.
 */
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { EventEmitter, on } from "node:events";
import {
  Health,
  type HealthCheckResponse,
  HealthCheckResponse_ServingStatus as Status,
  HealthCheckResponseSchema,
} from "./__generated__/grpc/health/v1/health_pb.js";

export { Status as ServingStatus };

export class HealthState {
  private readonly statuses = new Map<string, Status>();
  /** Emits "change" whenever a status changes. */
  readonly changes = new EventEmitter();
  /** Aborted when shutdown starts: open Watch streams end then instead of holding the server open. */
  private readonly closing = new AbortController();

  constructor(services: string[]) {
    for (const name of ["", ...services]) this.statuses.set(name, Status.NOT_SERVING);
    // One listener per Watch call: many watchers are normal, not a leak.
    this.changes.setMaxListeners(0);
  }

  get closed(): AbortSignal {
    return this.closing.signal;
  }

  /** Sets every service's status at once: the server is one process, ready or not as a whole. */
  setAll(status: Status): void {
    for (const name of this.statuses.keys()) this.statuses.set(name, status);
    this.changes.emit("change");
  }

  /** Every status NOT_SERVING, told to watchers, whose streams then end. */
  close(): void {
    this.setAll(Status.NOT_SERVING);
    this.closing.abort();
  }

  names(): string[] {
    return [...this.statuses.keys()];
  }

  get(service: string): Status | undefined {
    return this.statuses.get(service);
  }

  response(service: string): HealthCheckResponse {
    return create(HealthCheckResponseSchema, { status: this.get(service) ?? Status.SERVICE_UNKNOWN });
  }
}

export function registerHealth(router: ConnectRouter, state: HealthState): void {
  router.service(Health, {
    check(req) {
      if (state.get(req.service) === undefined)
        throw new ConnectError(`unknown service "${req.service}"`, Code.NotFound);
      return state.response(req.service);
    },
    list() {
      return { statuses: Object.fromEntries(state.names().map((name) => [name, state.response(name)])) };
    },
    async *watch(req, context) {
      const changes = on(state.changes, "change", { signal: AbortSignal.any([context.signal, state.closed]) });
      // The current status first, then every change, until the client goes away or shutdown starts.
      let last: Status | undefined;
      for (;;) {
        const now = state.get(req.service) ?? Status.SERVICE_UNKNOWN;
        if (now !== last) yield state.response(req.service);
        last = now;
        if (state.closed.aborted) return;
        try {
          await changes.next();
        } catch {
          return;
        }
      }
    },
  });
}
