# One image for every role: `gateway` (the default command), `scaler`, `worker`,
# and `up` (every role in one container). Node 24 runs the TypeScript sources
# directly: no build step. The image does NOT include redis-server: every role
# expects REDIS_URL (and REDIS_PASSWORD) pointing at a Redis of its own
# (docker-compose.yml and deploy/ run one), and the gateway exits with a clear
# error when it is missing. One process per container, Redis managed as Redis.

FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# npm's `prepare` runs this; without dev dependencies (no esbuild) it only notes that it skipped.
COPY scripts/build-dashboard.mjs ./scripts/
# node-llama-cpp ships prebuilt llama.cpp binaries as optional dependencies, so
# no compiler is needed here (the `engine` stage below builds one for the CPU).
RUN npm ci --omit=dev && npm cache clean --force

# The web dashboard's bundle (dist/dashboard/, served at /dashboard): built with the dev
# dependencies (esbuild, preact), of which only the bundle goes into the image.
FROM node:24-bookworm-slim AS dashboard
WORKDIR /app
COPY package.json package-lock.json tsconfig.dashboard.json ./
COPY scripts/build-dashboard.mjs ./scripts/
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY src/dashboard ./src/dashboard
RUN npm run build:dashboard

# llama.cpp built for the CPU of the machine that builds the image (`platform engine build`;
# docs/engines.md, "A build for this CPU"): CPU replicas load it on nodes whose CPU has the same
# instruction set and the prebuilt binary on others, saying which in their log. The compilers stay
# in this stage. `--build-arg LLAMA_BUILD=prebuilt` skips the build (about 10-30 minutes).
FROM deps AS engine
ARG LLAMA_BUILD=native
ENV PLATFORM_ENGINE_DIR=/app/engines
RUN mkdir -p /app/engines && if [ "$LLAMA_BUILD" = native ]; then \
      apt-get update && apt-get install -y --no-install-recommends cmake g++ make git && rm -rf /var/lib/apt/lists/*; fi
COPY bin ./bin
COPY src ./src
COPY workers ./workers
# The build links node-llama-cpp's local-build entry to /app/engines; the cloned source is not needed to load it.
RUN if [ "$LLAMA_BUILD" = native ]; then \
      node bin/platform.js engine build && rm -rf node_modules/node-llama-cpp/llama/llama.cpp; fi

FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    PLATFORM_DATA_DIR=/data \
    PLATFORM_ENGINE_DIR=/app/engines
WORKDIR /app
COPY --from=engine /app/node_modules ./node_modules
COPY --from=engine /app/engines ./engines
COPY package.json ./
COPY bin ./bin
COPY src ./src
COPY workers ./workers
COPY scaler ./scaler
# The gateway serves .platformrc.json's JSON Schema from here (GET /schemas/platformrc.schema.json).
COPY schemas ./schemas
# The templates `platform service create` writes a service from.
COPY templates ./templates
COPY --from=dashboard /app/dist/dashboard ./dist/dashboard
# The image's `node` user, by number so Kubernetes can verify runAsNonRoot.
RUN mkdir -p /data /models /work && chown 1000:1000 /data /models /work
USER 1000:1000
# /models: GGUF files mounted read-only; /data: registry artifacts and state of `up`;
# /work: the working directory, which `up` allows as a storage root (batch inputs and outputs).
# Not /app: the start directory is a storage root, and the code is nobody's batch input.
VOLUME ["/data", "/models", "/work"]
WORKDIR /work
# The API; 9464 is the metrics port (PLATFORM_METRICS_PORT), for the scraper only.
EXPOSE 8000 9464
ENTRYPOINT ["node", "/app/bin/platform.js"]
# The gateway alone (binds 0.0.0.0:8000); set PLATFORM_BOOTSTRAP_ADMIN_KEY for the first admin key.
CMD ["gateway"]
