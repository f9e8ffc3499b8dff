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
# The machine's pip mirrors alone where it has them (scripts/pip-index.sh); there the CPU build of
# torch is wanted, elsewhere pip's defaults pick the build.
source scripts/pip-index.sh
if $mirrored; then torch="torch==2.13.0+cpu"; else torch="torch==2.13.0"; fi
if ! timeout 900 "$VENV/bin/pip" install -q --timeout 30 --retries 1 "${index[@]}" "$torch" transformers==5.18.0 gguf safetensors accelerate sentencepiece tokenizers numpy >"$VENV/install.log" 2>&1; then
  echo "note: the Python reference stack could not be installed (the end of $VENV/install.log says why); the reference-model tests will skip" >&2
  tail -5 "$VENV/install.log" >&2
  exit 0
fi
if check; then echo "$(realpath "$VENV")/bin/python"; else echo "note: .venv-ref was installed but does not import; the reference-model tests will skip" >&2; fi
