"""
Prometheus metrics and a log line for every call, from one gRPC server interceptor: calls started,
calls handled by status code, and latency, per RPC (the names go-grpc-prometheus made common, so
existing dashboards and alerts fit). Served over plain HTTP on METRICS_PORT at /metrics.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from prometheus_client import Counter, Histogram

log = logging.getLogger("rpc")

STARTED = Counter(
    "grpc_server_started_total", "RPCs started on the server.", ["grpc_service", "grpc_method", "grpc_type"]
)
HANDLED = Counter(
    "grpc_server_handled_total",
    "RPCs completed on the server, by status code.",
    ["grpc_service", "grpc_method", "grpc_type", "grpc_code"],
)
LATENCY = Histogram(
    "grpc_server_handling_seconds",
    "Time from an RPC's start to its end on the server.",
    ["grpc_service", "grpc_method", "grpc_type"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)


def _code(context: grpc.ServicerContext, failed: bool) -> grpc.StatusCode:
    # context.code() is what the handler set (abort or set_code); nothing set means OK, or UNKNOWN
    # when the handler raised (grpcio answers UNKNOWN for an uncaught exception).
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.UNKNOWN if failed else grpc.StatusCode.OK


class MonitoringInterceptor(grpc.ServerInterceptor):
    """Counts, times and logs each call; the handler itself runs unchanged."""

    def intercept_service(self, continuation: Callable[..., Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:  # an unknown method: grpcio answers UNIMPLEMENTED itself
            return None
        # "/platform.items.v1.ItemService/GetItem"
        service, _, method = details.method.lstrip("/").rpartition("/")
        if handler.request_streaming:
            kind = "bidi_stream" if handler.response_streaming else "client_stream"
        else:
            kind = "server_stream" if handler.response_streaming else "unary"
        labels = (service, method, kind)

        def observe(start: float, context: grpc.ServicerContext, failed: bool) -> None:
            code = _code(context, failed)
            elapsed = time.perf_counter() - start
            HANDLED.labels(*labels, code.name).inc()
            LATENCY.labels(*labels).observe(elapsed)
            level = logging.ERROR if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL) else logging.INFO
            duration_ms = round(elapsed * 1000, 3)
            log.log(level, "rpc", extra={"method": details.method, "code": code.name, "duration_ms": duration_ms})

        def unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
            def wrapped(request: Any, context: grpc.ServicerContext) -> Any:
                STARTED.labels(*labels).inc()
                start, failed = time.perf_counter(), True
                try:
                    response = behavior(request, context)
                    failed = False
                    return response
                finally:
                    observe(start, context, failed)

            return wrapped

        def streaming(behavior: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
            def wrapped(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
                STARTED.labels(*labels).inc()
                start, failed = time.perf_counter(), True
                try:
                    yield from behavior(request, context)
                    failed = False
                finally:
                    observe(start, context, failed)

            return wrapped

        if handler.unary_unary:
            return handler._replace(unary_unary=unary(handler.unary_unary))
        if handler.unary_stream:
            return handler._replace(unary_stream=streaming(handler.unary_stream))
        if handler.stream_unary:
            return handler._replace(stream_unary=unary(handler.stream_unary))
        return handler._replace(stream_stream=streaming(handler.stream_stream))
