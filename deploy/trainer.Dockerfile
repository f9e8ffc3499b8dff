# The fine-tuning trainer image (`platform trainer`, deploy/base/trainer.yaml and
# components/gpu-trainer): the platform plus the Python stack train.py needs — torch (with
# CUDA), transformers, peft, safetensors. It starts from the vLLM worker image
# (deploy/vllm-worker.Dockerfile), which already holds the platform's code and Node next to
# vLLM's CUDA torch and its transformers, and adds peft. One image for CPU and GPU trainers:
# CUDA torch runs on the CPU where no GPU is present.
#
#   docker build -t platform:dev .
#   docker build -f deploy/vllm-worker.Dockerfile --build-arg PLATFORM_IMAGE=platform:dev -t platform-vllm:dev .
#   docker build -f deploy/trainer.Dockerfile --build-arg VLLM_WORKER_IMAGE=platform-vllm:dev -t platform-trainer:dev .
#
# The overlays run it as the `platform-trainer` image (deploy/README.md, "Fine-tuning trainers").

# The vLLM worker image built from the same platform image (same tag as the gateway's).
ARG VLLM_WORKER_IMAGE=platform-vllm:dev

FROM ${VLLM_WORKER_IMAGE}
# peft is the one package vLLM's image lacks. Pinned to a release that supports the
# transformers vLLM pins (train.py needs transformers >= 4.56 for `from_pretrained(dtype=...)`,
# which vLLM >= 0.11 requires too); override with --build-arg PEFT_VERSION=...
ARG PEFT_VERSION=0.17.1
USER root
# vLLM's image installs into the system Python with uv; plain pip where a base has no uv.
RUN if command -v uv >/dev/null 2>&1; then uv pip install --system --no-cache "peft==${PEFT_VERSION}"; \
    else python3 -m pip install --no-cache-dir "peft==${PEFT_VERSION}"; fi
USER 1000:1000
# The interpreter train.py runs with (docs/fine-tuning.md); offline: bases come from the registry.
ENV PLATFORM_TRAINER_PYTHON=python3 \
    HF_HUB_OFFLINE=1
# Fails the build, not the first job, when the stack is incomplete or the CLI cannot load.
RUN python3 -c "import torch, transformers, peft, safetensors; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" \
 && node /app/bin/platform.js trainer --help >/dev/null
WORKDIR /work
ENTRYPOINT ["node", "/app/bin/platform.js"]
CMD ["trainer"]
