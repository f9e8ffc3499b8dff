#!/usr/bin/env bash
# Makes .venv-ref, the Python reference stack (CPU torch, transformers, peft, gguf, safetensors, ...) that
# scripts/reference/make-hf-fixtures.py and the converter's stories260K proof run on, from the local
# pip mirrors, and adds lm-evaluation-harness (its hf and local-completions backends) for
# test/integration/lm-eval-platform.test.ts. Idempotent (what is already there is kept),
# time-bounded, and failing soft: without it the tests that need it skip, saying so. Prints the
# python path on success.
set -u
cd "$(dirname "$0")/../.."
VENV="${1:-.venv-ref}"
check() { "$VENV/bin/python" -c "import torch, transformers, gguf, safetensors, tokenizers, sentencepiece, numpy, peft" >/dev/null 2>&1; }
# Presence only (find_spec, no import): importing lm_eval's stack would cost seconds on every run.
LMEVAL_MODULES="lm_eval datasets sacrebleu aiohttp tenacity dill"
check_lmeval() {
  "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))" \
    $LMEVAL_MODULES >/dev/null 2>&1
}
if check && check_lmeval; then
  echo "$(realpath "$VENV")/bin/python"
  exit 0
fi
# The machine's pip mirrors alone where it has them (scripts/pip-index.sh); there the CPU build of
# torch is wanted, elsewhere pip's defaults pick the build.
source scripts/pip-index.sh
if ! check; then
  if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
    echo "note: python3 -m venv failed; the reference-model tests will skip" >&2
    exit 0
  fi
  if $mirrored; then torch="torch==2.13.0+cpu"; else torch="torch==2.13.0"; fi
  if ! timeout 900 "$VENV/bin/pip" install -q --timeout 30 --retries 1 "${index[@]}" "$torch" transformers==5.18.0 peft==0.21.0 gguf safetensors accelerate sentencepiece tokenizers numpy >"$VENV/install.log" 2>&1; then
    echo "note: the Python reference stack could not be installed (the end of $VENV/install.log says why); the reference-model tests will skip" >&2
    tail -5 "$VENV/install.log" >&2
    exit 0
  fi
  if ! check; then
    echo "note: .venv-ref was installed but does not import; the reference-model tests will skip" >&2
    exit 0
  fi
fi
# lm-eval itself without its dependencies: it requires evaluate, rouge-score, scikit-learn,
# sqlitedict, pytablewriter and word2number, which the mirrors partly lack and which neither the hf
# nor the local-completions backend nor a multiple-choice task imports. What they do import is
# installed beside it (pytablewriter only prints the results table: scripts/reference/lm-eval.py
# runs lm_eval without it).
if ! check_lmeval; then
  if ! { timeout 600 "$VENV/bin/pip" install -q --timeout 30 --retries 1 "${index[@]}" --no-deps lm-eval==0.4.13 &&
    timeout 600 "$VENV/bin/pip" install -q --timeout 30 --retries 1 "${index[@]}" datasets==5.0.1 sacrebleu==2.6.0 aiohttp==3.14.3 tenacity==9.1.4 dill==0.4.1; } >"$VENV/install-lmeval.log" 2>&1; then
    echo "note: lm-eval could not be installed (the end of $VENV/install-lmeval.log says why); the lm-eval test will skip" >&2
    tail -5 "$VENV/install-lmeval.log" >&2
  fi
fi
echo "$(realpath "$VENV")/bin/python"
