# The worker image for `framework: vllm` endpoints: vLLM's official OpenAI-server
# image (CUDA, Python, `vllm`) with the platform's worker added. The container runs
# `platform worker`, which starts `vllm serve` itself as a child process
# (workers/engines/vllm-process.ts), so vLLM's own ENTRYPOINT is replaced.
#
# Build it from the platform image, so the code, its production node_modules and
# the Node binary are exactly the ones the root Dockerfile built and tested
# (nothing is installed twice, and the two images of one release cannot drift):
#
#   docker build -t platform:dev .
#   docker build -f deploy/vllm-worker.Dockerfile --build-arg PLATFORM_IMAGE=platform:dev -t platform-vllm:dev .
#
# and give it to the scaler as PLATFORM_VLLM_WORKER_IMAGE (deploy/README.md, "vLLM workers").
# A separate file rather than a stage of the root Dockerfile: as its last stage it
# would become `docker build .`'s default target, and anywhere in it a builder
# without BuildKit would pull vLLM's ~10 GB image for every gateway build.

# Pinned: a new vLLM can change flags the platform passes (workers/engines/vllm-flags.ts).
# Override (a mirror, a newer release, a digest) with --build-arg VLLM_IMAGE=...
ARG VLLM_IMAGE=vllm/vllm-openai:v0.11.0
# The root Dockerfile's image, built first; use the same tag as the gateway and scaler.
ARG PLATFORM_IMAGE=platform:dev

FROM ${PLATFORM_IMAGE} AS platform

FROM ${VLLM_IMAGE}
# Where vLLM's image installs the `vllm` console script (`uv pip install --system`
# on its Ubuntu Python); checked below, so a base that moves it fails the build.
ARG VLLM_BIN=/usr/local/bin/vllm
# The official node image's binary (the platform image's base): Node 24 needs only
# glibc >= 2.28 and libstdc++, which vLLM's Ubuntu base has.
COPY --from=platform /usr/local/bin/node /usr/local/bin/node
COPY --from=platform /app /app
# The image's `vllm`, not whatever is first on PATH; HOME holds the caches vLLM,
# Triton, FlashInfer and Hugging Face write at start-up, so it must be writable
# by the non-root user. No usage reports leave a self-hosted deployment.
ENV NODE_ENV=production \
    PLATFORM_DATA_DIR=/data \
    VLLM_BIN=${VLLM_BIN} \
    VLLM_NO_USAGE_STATS=1 \
    HOME=/home/platform
# vLLM's image runs as root and has no user 1000; the Kubernetes backend runs
# workers as 1000:1000 (runAsNonRoot), and PyTorch/Triton look the user up by uid.
RUN if ! getent passwd 1000 >/dev/null; then \
      getent group 1000 >/dev/null || groupadd --gid 1000 platform; \
      useradd --uid 1000 --gid 1000 --no-create-home --home-dir /home/platform --shell /bin/sh platform; \
    fi \
 && mkdir -p /home/platform /data /models /work \
 && chown 1000:1000 /home/platform /data /models /work \
 && if [ ! -x "$VLLM_BIN" ]; then echo "no vllm executable at $VLLM_BIN; pass --build-arg VLLM_BIN=\$(command -v vllm)" >&2; exit 1; fi
USER 1000:1000
# Fails the build, not the first replica, if Node cannot run on this base or the CLI cannot load
# (as the runtime user, so the compile cache this leaves in /tmp stays writable by it).
RUN node --version && node /app/bin/platform.js worker --help >/dev/null
# /data: the model artifacts a replica downloads; /models: mounted weights; /work: start directory.
VOLUME ["/data", "/models", "/work"]
WORKDIR /work
# The worker's health server (/livez, /readyz, /metrics); vLLM itself listens on 127.0.0.1 only.
EXPOSE 8081
# The platform image's entrypoint, so the scaler's worker args (`worker --endpoint ...`) work with either image.
ENTRYPOINT ["node", "/app/bin/platform.js"]
CMD ["worker"]
