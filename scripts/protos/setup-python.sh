#!/usr/bin/env bash
# Makes .venv-grpc, the Python that `platform proto generate --lang python` runs in the tests:
# grpcio-tools (its protoc, with the python, pyi and gRPC generators) and the protobuf and grpcio
# runtimes the generated code imports, from the machine's pip mirrors (scripts/pip-index.sh); and
# what a Python service scaffold (src/scaffold/python.ts) runs and tests with: psycopg (with
# its bundled libpq), prometheus-client, pytest, ruff (the scaffold's linter and formatter) and
# setuptools (test/e2e/service-python.test.ts builds the scaffold's wheel offline with it), at the
# versions the Python template's requirements.lock pins.
# Idempotent, time-bounded and failing soft: without it the Python generation test skips, saying
# so. Prints the python path on success.
set -u
cd "$(dirname "$0")/../.."
VENV="${1:-.venv-grpc}"
check() {
  "$VENV/bin/python" -c "import grpc, grpc_tools.protoc, google.protobuf, psycopg, prometheus_client, pytest, setuptools" >/dev/null 2>&1 &&
    "$VENV/bin/ruff" --version >/dev/null 2>&1
}
if check; then
  echo "$(realpath "$VENV")/bin/python"
  exit 0
fi
# An existing venv is completed rather than made again (it may be a link to a shared one, which
# `python3 -m venv` refuses to recreate).
if [ ! -x "$VENV/bin/python" ] && ! python3 -m venv "$VENV" >/dev/null 2>&1; then
  echo "note: python3 -m venv failed; the Python proto generation test will skip" >&2
  exit 0
fi
source scripts/pip-index.sh
if ! timeout 300 "$VENV/bin/pip" install -q --timeout 30 --retries 1 "${index[@]}" -c templates/service/python/common/requirements.lock grpcio-tools grpcio protobuf "psycopg[binary]" prometheus-client pytest ruff setuptools >"$VENV/install.log" 2>&1; then
  echo "note: grpcio-tools could not be installed (the end of $VENV/install.log says why); the Python proto generation test will skip" >&2
  tail -5 "$VENV/install.log" >&2
  exit 0
fi
if check; then echo "$(realpath "$VENV")/bin/python"; else echo "note: .venv-grpc was installed but does not import grpc_tools, psycopg, prometheus_client or pytest, or has no ruff; the Python proto generation test will skip" >&2; fi
