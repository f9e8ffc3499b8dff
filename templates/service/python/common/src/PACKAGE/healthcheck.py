"""
`python -m {{package}}.healthcheck`: exit 0 when the server on this machine's PORT answers the gRPC
health check SERVING, 1 otherwise. The Dockerfile's HEALTHCHECK runs it (no curl in the image, and
gRPC needs HTTP/2 anyway).
"""

import os
import sys

import grpc

from .health import check


def main() -> int:
    target = f"127.0.0.1:{os.environ.get('PORT', '8080')}"
    try:
        status = check(target)
    except grpc.RpcError as e:
        print(f"health check of {target} failed: {e.code().name} {e.details()}", file=sys.stderr)
        return 1
    if status != "SERVING":
        print(f"{target} is {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
