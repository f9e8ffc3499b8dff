"""
The standard gRPC health service, grpc.health.v1.Health (Check and Watch), which Kubernetes'
gRPC probes, grpc_health_probe and load balancers call. grpcio-health-checking is not in the
package mirrors this service installs from, so its two messages are declared here, in a private
descriptor pool (no clash if that package is added later), and served with grpcio's generic
handlers: the wire format is exactly the standard one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

HEALTH_SERVICE = "grpc.health.v1.Health"


def _messages() -> tuple[Any, Any]:
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="grpc/health/v1/health.proto", package="grpc.health.v1", syntax="proto3"
    )
    request = file.message_type.add(name="HealthCheckRequest")
    request.field.add(name="service", json_name="service", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    response = file.message_type.add(name="HealthCheckResponse")
    status = response.enum_type.add(name="ServingStatus")
    for name, number in (("UNKNOWN", 0), ("SERVING", 1), ("NOT_SERVING", 2), ("SERVICE_UNKNOWN", 3)):
        status.value.add(name=name, number=number)
    response.field.add(
        name="status",
        json_name="status",
        number=1,
        type=field.TYPE_ENUM,
        type_name=".grpc.health.v1.HealthCheckResponse.ServingStatus",
        label=field.LABEL_OPTIONAL,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckRequest")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("grpc.health.v1.HealthCheckResponse")),
    )


HealthCheckRequest, HealthCheckResponse = _messages()
SERVING = HealthCheckResponse.ServingStatus.Value("SERVING")
NOT_SERVING = HealthCheckResponse.ServingStatus.Value("NOT_SERVING")
SERVICE_UNKNOWN = HealthCheckResponse.ServingStatus.Value("SERVICE_UNKNOWN")


class Health:
    """Each service's status; "" is the server as a whole. Everything starts NOT_SERVING."""

    def __init__(self, services: Iterable[str]) -> None:
        self._status = {name: NOT_SERVING for name in ("", *services)}
        self._changed = threading.Condition()
        self._stopping = False

    def set(self, status: int) -> None:
        """Sets every service's status: the server is ready (SERVING) or not (NOT_SERVING)."""
        with self._changed:
            for name in self._status:
                self._status[name] = status
            self._changed.notify_all()

    def stop(self) -> None:
        """NOT_SERVING everywhere and ends every Watch, so a shutdown is not held up by watchers."""
        with self._changed:
            self._stopping = True
        self.set(NOT_SERVING)

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        status = self._status.get(request.service)
        if status is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return HealthCheckResponse(status=status)

    def Watch(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        last = None
        while context.is_active():
            with self._changed:
                status = self._status.get(request.service, SERVICE_UNKNOWN)
                if status == last:
                    if self._stopping:
                        return
                    self._changed.wait(timeout=1)
                    continue
            last = status
            yield HealthCheckResponse(status=status)

    def register(self, server: grpc.Server) -> None:
        handlers = {
            "Check": grpc.unary_unary_rpc_method_handler(
                self.Check,
                request_deserializer=HealthCheckRequest.FromString,
                response_serializer=HealthCheckResponse.SerializeToString,
            ),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self.Watch,
                request_deserializer=HealthCheckRequest.FromString,
                response_serializer=HealthCheckResponse.SerializeToString,
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(HEALTH_SERVICE, handlers),))


def check(target: str, service: str = "", timeout: float = 3.0) -> str:
    """Asks the server at `target` (host:port) for `service`'s status; returns its name (SERVING, ...)."""
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(
            f"/{HEALTH_SERVICE}/Check",
            request_serializer=HealthCheckRequest.SerializeToString,
            response_deserializer=HealthCheckResponse.FromString,
        )
        response = call(HealthCheckRequest(service=service), timeout=timeout)
    return HealthCheckResponse.ServingStatus.Name(response.status)
