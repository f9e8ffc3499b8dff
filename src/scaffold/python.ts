/**
 * `platform service create <name> --lang python`: a gRPC service in Python's conventions. The files
 * that do not depend on the proto are templates (templates/service/python/: `common/`, then `plain/`
 * or `example/`), rendered as the Node ones are (templates.ts: `{{package}}`, `{{name}}`,
 * `{{service}}`, `{{stubs}}`), with `src/PACKAGE/` named after the service; `service.py` and
 * `tests/test_service.py` follow the proto's RPCs (python/service.ts), and the README says how to run, test, build, publish and deploy it.
 * docs/scaffolds.md ("Python") says what each file is and why.
 */
import { CommandError } from "../process/command-error.ts";
import { moduleOf, packageName } from "./python/names.ts";
import { exampleShape, servicePy, testsPy } from "./python/service.ts";
import { renderDir, TEMPLATES_DIR } from "./templates.ts";
import type { ScaffoldFile, ScaffoldInput, Scaffolder } from "./types.ts";

export const scaffoldPython: Scaffolder = async (input) => {
  if (!/^[a-z][a-z0-9-]*$/.test(input.name))
    throw new CommandError(
      `service name ${JSON.stringify(input.name)}: use lowercase letters, digits and -, starting with a letter`,
    );
  // Checked before anything is rendered, so a proto without the example's shape writes nothing.
  const shape = input.example ? exampleShape(input) : undefined;
  const pkg = packageName(input.name);
  // STUBS: the generated stubs' top-level package (`items`), first-party code for ruff's isort.
  const stubs = moduleOf(input.service.file).split(".")[0] as string;
  const values = { package: pkg, name: input.name, service: input.service.full_name, stubs };
  const files: ScaffoldFile[] = [];
  for (const dir of ["common", input.example ? "example" : "plain"]) {
    const rendered = await renderDir(`${TEMPLATES_DIR}python/${dir}`, { values, flags: {} });
    for (const f of rendered) files.push({ ...f, path: f.path.replace(/^src\/PACKAGE\//, `src/${pkg}/`) });
  }
  files.push(
    { path: `src/${pkg}/service.py`, content: servicePy(input, shape) },
    { path: "tests/test_service.py", content: testsPy(input, shape) },
    { path: "README.md", content: readme(input, pkg) },
  );
  return files.sort((a, b) => a.path.localeCompare(b.path));
};

function readme(input: ScaffoldInput, pkg: string): string {
  const { name, service } = input;
  const stubs = moduleOf(service.file).split(".").slice(0, -1).join("/");
  const image = input.imageRepository ?? `<registry>/<org>/${name}`;
  const rpcs = service.rpcs.map((r) => `\`${r.name}\``).join(", ");
  const example = input.example
    ? `It is the example ItemService: \`CreateItem\` stores an item under a generated id (an empty
name is \`INVALID_ARGUMENT\`), \`GetItem\` reads it back (a missing id is \`NOT_FOUND\`, \`item <id> not
found\`), \`ListItems\` lists items in creation order, a page at a time when the request has
\`page_size\`/\`page_token\`. Items live in PostgreSQL when \`DATABASE_URL\` is set (the \`items\` table of
\`migrations/0001_init.sql\`), in memory otherwise (\`src/${pkg}/store.py\`).`
    : `Each handler in \`src/${pkg}/service.py\` answers \`UNIMPLEMENTED\` until you write it; its test in
\`tests/test_service.py\` says so, and is the one to replace.`;
  return `# ${name}

\`${service.full_name}\` (${rpcs}), served over gRPC by Python's \`grpcio\`, from
\`${input.protoRoot}/${service.file}\`. ${example}

| path | what |
| --- | --- |
| \`src/${pkg}/service.py\` | the handlers, one per RPC |
| \`src/${pkg}/server.py\` | the server: gRPC on \`PORT\`, health, metrics, logs, migrations, graceful stop |
| \`src/${pkg}/health.py\`, \`healthcheck.py\` | the standard \`grpc.health.v1.Health\` service, and the image's \`HEALTHCHECK\` |
| \`src/${pkg}/metrics.py\`, \`logs.py\` | Prometheus metrics per RPC, JSON logs |
| \`src/${pkg}/db.py\`, \`migrations/\` | PostgreSQL (psycopg 3) and the SQL migrations applied at start |
| \`src/__generated__/${stubs}/\` | the stubs \`platform proto generate --lang python\` writes (committed; do not edit) |
| \`tests/\` | pytest: the server on a free port, every RPC through a real gRPC client |

## Set up

Python 3.11 or later. pip on the platform's machines installs from package mirrors: give them as
the only indexes, \`--index-url\` the first and \`--extra-index-url\` the others (with
\`--extra-index-url\` alone pip first waits minutes on the unreachable default index):

\`\`\`sh
python3 -m venv .venv
set -- $(python3 -m pip config get global.extra-index-url)   # the configured mirrors, if any
.venv/bin/pip install --index-url "$1" --extra-index-url "$2" -c requirements.lock -e '.[dev]'
\`\`\`

Elsewhere, \`.venv/bin/pip install -c requirements.lock -e '.[dev]'\`. \`requirements.lock\` pins every package
(the image's build installs with it too): change a version in \`pyproject.toml\` and in it together. Then \`platform proto generate --lang python\`
writes the stubs into \`src/__generated__/\` with \`.venv/bin/python\` (its \`grpcio-tools\`, so the
stubs match the installed \`protobuf\`): \`platform service create\` ran it already where a Python
with grpcio-tools was there; run it again after changing the proto, and commit the stubs.

## Run

\`\`\`sh
.venv/bin/python -m ${pkg}                # gRPC on :8080, metrics on :9464
PORT=9000 DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m ${pkg}
\`\`\`

| variable | default | |
| --- | --- | --- |
| \`PORT\` | \`8080\` | gRPC (HTTP/2); \`0\` picks a free port, named in the \`listening\` log |
| \`METRICS_PORT\` | \`9464\` | Prometheus \`/metrics\` over HTTP/1.1; \`off\` serves none |
| \`DATABASE_URL\` | unset | PostgreSQL; the service waits for it (\`DATABASE_WAIT_SECONDS\`, 30) and applies \`migrations/\` before it reports SERVING |
| \`MIGRATIONS_DIR\` | \`./migrations\` | where the SQL files are |
| \`SHUTDOWN_GRACE_SECONDS\` | \`10\` | after SIGTERM, how long calls in flight may finish |
| \`LOG_LEVEL\`, \`HOST\`, \`GRPC_MAX_WORKERS\` | \`INFO\`, \`0.0.0.0\`, \`16\` | |

Metrics have their own port because the gRPC port speaks only HTTP/2 gRPC:
\`grpc_server_started_total\`, \`grpc_server_handled_total\` (by \`grpc_code\`) and
\`grpc_server_handling_seconds\`, per \`grpc_service\` and \`grpc_method\`. Logs are one JSON object a
line on stdout, one per call (\`method\`, \`code\`, \`duration_ms\`). Health:
\`grpc.health.v1.Health/Check\` answers \`SERVING\` for \`""\` and \`${service.full_name}\` once ready,
\`NOT_SERVING\` from SIGTERM on.

**Migrations** are plain SQL files, \`migrations/NNNN_name.sql\`, applied at start in name order,
each once (recorded in \`schema_migrations\`, under an advisory lock so replicas starting together do
not race). Add a new file for every change; never edit one that has run.

## Test

\`\`\`sh
.venv/bin/python -m pytest
TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python -m pytest   # against PostgreSQL
\`\`\`

The tests start the server in-process on free ports and call it through the generated gRPC stub.
Lint and format with ruff (settings in \`pyproject.toml\`; \`src/__generated__\` is left alone):

\`\`\`sh
.venv/bin/ruff check . && .venv/bin/ruff format --check .
\`\`\`

## Build, publish, deploy

\`\`\`sh
git add -A && git commit -m "${name}: first version"
platform publish            # builds the Dockerfile, tags ${image}:<version>-<short sha>, pushes it
platform dev-center service deploy ${name} --tag <version>-<short sha> --repo-type python --image-repository ${image}
\`\`\`

\`platform publish\` reads \`version\` from \`pyproject.toml\`. The Dockerfile is multi-stage (the
venv is built in the first stage, the last holds only the venv, the migrations and a non-root user)
with a \`HEALTHCHECK\`. Its base image is \`ARG PYTHON_IMAGE\` (default \`python:3.11-slim\`); where
that registry is out of reach, pass a mirrored one, and the pip mirrors the same way:
\`--build-arg PYTHON_IMAGE=... --build-arg PIP_INDEX_URL=... --build-arg PIP_EXTRA_INDEX_URL=...\`
(build arguments of the build stage only: they do not reach the image).

## Why gRPC and not Connect

The platform's gateway speaks Connect (and gRPC, gRPC-Web) to clients. No Connect library for
Python is available from the package mirrors, so this service serves plain gRPC with \`grpcio\`; the
gateway's service record says so, and it transcodes clients' Connect calls to gRPC with the
published descriptors (\`platform proto publish\`).

## The generated stubs' module names

Package \`${input.package.package}\` would become a Python package \`${input.package.package.split(".")[0]}\`${input.package.package.startsWith("platform.") ? ", which shadows (or is shadowed by) the standard library's `platform` module" : ""}. \`platform proto generate\`
therefore roots modules below \`platform/\`: \`${input.protoRoot}/${service.file}\` is the module
\`${moduleOf(service.file)}\`. \`pyproject.toml\` puts \`src/__generated__\` beside \`src\` on the path (pytest) and
in the installed distribution, so \`from ${moduleOf(service.file).split(".").slice(0, -1).join(".")} import ${moduleOf(service.file).split(".").at(-1)}\` works everywhere.
`;
}
