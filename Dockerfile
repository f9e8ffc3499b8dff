# One image for every role: `up` (the whole platform on one host), `gateway`,
# `scaler`, `worker`. Node 24 runs the TypeScript sources directly: no build step.

FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# node-llama-cpp ships prebuilt llama.cpp binaries as optional dependencies, so
# no compiler is needed here.
RUN npm ci --omit=dev && npm cache clean --force

FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    PLATFORM_DATA_DIR=/data
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY bin ./bin
COPY src ./src
COPY workers ./workers
COPY scaler ./scaler
# The image's `node` user, by number so Kubernetes can verify runAsNonRoot.
RUN mkdir -p /data /models && chown 1000:1000 /data /models
USER 1000:1000
# /models: GGUF files mounted read-only; /data: registry artifacts and state of `up`.
VOLUME ["/data", "/models"]
EXPOSE 8000
ENTRYPOINT ["node", "bin/platform.js"]
# `up` binds 127.0.0.1 by default, unreachable from outside a container.
CMD ["up", "--host", "0.0.0.0"]
