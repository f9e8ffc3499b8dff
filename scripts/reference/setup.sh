#!/usr/bin/env bash
# Makes .venv-ref, the Python reference stack (CPU torch, transformers, gguf, safetensors, ...) that
# scripts/reference/make-hf-fixtures.py and the converter's stories260K proof run on, from the local
# pip mirrors. Idempotent (an existing venv that imports transformers is kept), time-bounded, and
# failing soft: without it the tests that need it skip, saying so. Prints the python path on success.
set -u
cd "$(dirname "$0")/../.."
VENV="${1:-.venv-ref}"
check() { "$VENV/bin/python" -c "import torch, transformers, gguf, safetensors, tokenizers, sentencepiece, numpy" >/dev/null 2>&1; }
if check; then
  echo "$(realpath "$VENV")/bin/python"
  exit 0
fi
if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
  echo "note: python3 -m venv failed; the reference-model tests will skip" >&2
  exit 0
fi
# Where pip is configured with package mirrors (extra-index-url), they alone are used: pip would
# otherwise try its default index first and wait on retries where there is no internet. There the
# CPU build of torch is wanted; elsewhere pip's defaults pick the build.
mirrors=$(python3 -m pip config get global.extra-index-url 2>/dev/null || true)
if [ -n "$mirrors" ]; then
  set -- $mirrors
  index=(--index-url "$1")
  shift
  for extra in "$@"; do index+=(--extra-index-url "$extra"); done
  torch="torch==2.13.0+cpu"
else
  index=()
  torch="torch==2.13.0"
fi
if ! timeout 900 "$VENV/bin/pip" install -q --timeout 30 --retries 1 "${index[@]}" "$torch" transformers==5.18.0 gguf safetensors accelerate sentencepiece tokenizers numpy >"$VENV/install.log" 2>&1; then
  echo "note: the Python reference stack could not be installed (the end of $VENV/install.log says why); the reference-model tests will skip" >&2
  tail -5 "$VENV/install.log" >&2
  exit 0
fi
if check; then echo "$(realpath "$VENV")/bin/python"; else echo "note: .venv-ref was installed but does not import; the reference-model tests will skip" >&2; fi
