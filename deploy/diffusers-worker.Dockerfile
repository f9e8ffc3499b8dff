# The worker image for `framework: diffusers` endpoints (docs/images.md): PyTorch's official CUDA
# runtime image with diffusers, transformers and safetensors, and the platform's worker added. The
# container runs `platform worker`, which starts workers/engines/diffusers/server.py itself as a
# child process (workers/engines/diffusers.ts), as the vLLM image's worker starts `vllm serve`.
#
# Build it from the platform image, so the code, its production node_modules and the Node binary
# are exactly the ones the root Dockerfile built and tested:
#
#   docker build -t platform:dev .
#   docker build -f deploy/diffusers-worker.Dockerfile --build-arg PLATFORM_IMAGE=platform:dev -t platform-diffusers:dev .
#
# and give it to the scaler as PLATFORM_DIFFUSERS_WORKER_IMAGE (beside PLATFORM_VLLM_WORKER_IMAGE).
# Without a GPU on the node the same image runs the pipeline on the CPU.

# Pinned: torch and diffusers versions decide the images a seed makes (docs/images.md).
ARG TORCH_IMAGE=pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime
ARG DIFFUSERS_VERSION=0.35.2
ARG TRANSFORMERS_VERSION=4.57.1
ARG PLATFORM_IMAGE=platform:dev

FROM ${PLATFORM_IMAGE} AS platform

FROM ${TORCH_IMAGE}
ARG DIFFUSERS_VERSION
ARG TRANSFORMERS_VERSION
RUN pip install --no-cache-dir "diffusers==${DIFFUSERS_VERSION}" "transformers==${TRANSFORMERS_VERSION}" safetensors accelerate pillow
COPY --from=platform /usr/local/bin/node /usr/local/bin/node
COPY --from=platform /app /app
# HOME holds the caches torch and Hugging Face write, so it must be writable by the non-root user;
# the pipeline is loaded from the replica's local copy only (HF_HUB_OFFLINE, set by the engine).
ENV NODE_ENV=production \
    PLATFORM_DATA_DIR=/data \
    PLATFORM_IMAGES_PYTHON=/opt/conda/bin/python \
    HOME=/home/platform
RUN if ! getent passwd 1000 >/dev/null; then \
      getent group 1000 >/dev/null || groupadd --gid 1000 platform; \
      useradd --uid 1000 --gid 1000 --no-create-home --home-dir /home/platform --shell /bin/sh platform; \
    fi \
 && mkdir -p /home/platform /data /models /work \
 && chown 1000:1000 /home/platform /data /models /work \
 && "$PLATFORM_IMAGES_PYTHON" -c "import torch, diffusers, transformers, safetensors, PIL"
USER 1000:1000
# Fails the build, not the first replica, if Node cannot run on this base or the CLI cannot load.
RUN node --version && node /app/bin/platform.js worker --help >/dev/null
VOLUME ["/data", "/models", "/work"]
WORKDIR /work
# The worker's health server (/livez, /readyz, /metrics); the diffusers child listens on 127.0.0.1 only.
EXPOSE 8081
ENTRYPOINT ["node", "/app/bin/platform.js"]
CMD ["worker"]
