#!/usr/bin/env bash
# `npm run setup:python`: makes .venv-ref, the Python that the fine-tuning trainer, the evaluation
# references and the image engine run on (docs/fine-tuning.md, "The trainer's Python"), which
# `platform up` and `platform trainer` find by themselves. It is the reference stack
# (scripts/reference/setup.sh: CPU torch where the pip mirrors have it, transformers, peft, lm-eval,
# ...) plus diffusers, all from the configured pip index (scripts/pip-index.sh); diffusers also from
# the wheels in shared/wheels or ../shared/wheels (or $PLATFORM_WHEELS_DIR) where there are any.
# Idempotent: a venv that has everything returns at once, and what is there is kept. Prints the
# venv's python when it is complete; otherwise says what is missing and why, and exits 1 (CI calls
# it failing soft: the tests that need it skip, saying so).
set -u
cd "$(dirname "$0")/.."
VENV="${1:-.venv-ref}"
# Presence only (find_spec, no import): importing torch's stack would cost seconds on every run. The
# reference setup imports what it installs, so a venv it completed imports.
# What the trainer and the image engine need, then what only the evaluation references' lm-eval does.
NEEDED="torch transformers gguf safetensors tokenizers sentencepiece numpy peft diffusers"
LMEVAL="lm_eval datasets sacrebleu aiohttp tenacity dill"
present() {
  "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))" \
    "$@" >/dev/null 2>&1
}
complete() {
  echo "$(realpath "$VENV")/bin/python"
  exit 0
}
present $NEEDED $LMEVAL && complete

python=$(bash scripts/reference/setup.sh "$VENV")
if [ -z "$python" ]; then
  echo "setup:python: the reference stack could not be installed (above: why); fine-tuning jobs fail until it is" >&2
  exit 1
fi
if ! present diffusers; then
  source scripts/pip-index.sh
  links=()
  for dir in "${PLATFORM_WHEELS_DIR:-}" shared/wheels ../shared/wheels; do
    if [ -n "$dir" ] && [ -d "$dir" ]; then links+=(--find-links "$(realpath "$dir")"); fi
  done
  if ! timeout 600 "$VENV/bin/pip" install -q --timeout 30 --retries 1 "${index[@]}" "${links[@]}" diffusers \
    >"$VENV/install-diffusers.log" 2>&1 || ! present diffusers; then
    echo "setup:python: diffusers could not be installed (the end of $VENV/install-diffusers.log says why); the image engine needs it" >&2
    tail -5 "$VENV/install-diffusers.log" >&2
    exit 1
  fi
fi
if ! present $NEEDED; then
  echo "setup:python: $VENV still lacks some of: $NEEDED (the install logs in $VENV say why)" >&2
  exit 1
fi
# The reference setup said why lm-eval is missing; fine-tuning and images work without it.
present $LMEVAL || echo "setup:python: lm-eval is missing (above: why); fine-tuning and images work without it, lm-eval evaluations do not" >&2
complete
