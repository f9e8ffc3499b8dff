#!/usr/bin/env bash
# Makes a stand-in base image (docs/publish.md, "Base images") FROM scratch out of this machine's
# own runtime, for machines that cannot pull node:24-slim or python:3.11-slim from a public registry:
# the runtime, sh and a few core tools, the shared libraries `ldd` lists for them, npm (Node) or pip
# (Python), the CA bundle and an /etc/passwd with a non-root user (node or app, uid 1000). It is built
# with buildah and pushed to the reference given, from where builds take it as NODE_IMAGE or
# PYTHON_IMAGE (`platform publish --build-arg NODE_IMAGE=<ref>`, or build.args in .platformrc.json).
#
#   scripts/services/make-base-image.sh node   127.0.0.1:5000/base/node:24-slim
#   scripts/services/make-base-image.sh python 127.0.0.1:5000/base/python:3.11-slim
#
# Environment: NODE_BIN (default: this checkout's node_modules/.bin/node, else `node` on PATH; must be
# Node 24 or newer), PYTHON_BIN (default: pyenv's 3.11, else its newest 3.x, else python3),
# NO_PUSH=1 (build and tag only). buildah's storage and session are its own: CONTAINERS_STORAGE_CONF,
# STORAGE_DRIVER (vfs where overlay is unavailable), XDG_RUNTIME_DIR or REGISTRY_AUTH_FILE for the
# login the push uses (`buildah login`, or `platform registry login` in a workspace). TLS is verified
# except for loopback registries (127.0.0.0/8, localhost, [::1]), which are plain HTTP here.
set -euo pipefail

usage() { echo "usage: $0 node|python <registry>/<path>:<tag>" >&2; exit 2; }
[ $# -eq 2 ] || usage
kind=$1
ref=$2
case "$kind" in node|python) ;; *) usage ;; esac
command -v buildah >/dev/null || { echo "error: buildah is not installed (apt-get install buildah)" >&2; exit 1; }

here=$(cd "$(dirname "$0")/../.." && pwd)
root=$(mktemp -d)
container=""
cleanup() {
  [ -n "$container" ] && buildah rm "$container" >/dev/null 2>&1 || true
  rm -rf "$root"
}
trap cleanup EXIT

# Every library a binary or extension module loads, at the same paths in the image (the loader included).
copy_libs_of() {
  { ldd "$1" 2>/dev/null || true; } | { grep -oE "/[^ ]+" || true; } | while read -r lib; do
    [ -e "$lib" ] || continue
    mkdir -p "$root$(dirname "$lib")"
    [ -e "$root$lib" ] || cp -L "$lib" "$root$lib"
  done
}

# A file at `dest` in the image, and every library it loads.
copy_with_libs() {
  local file=$1 dest=${2:-$1}
  mkdir -p "$root$(dirname "$dest")"
  cp -L "$file" "$root$dest"
  copy_libs_of "$file"
}

# sh, env and the tools a Dockerfile's RUN lines and a HEALTHCHECK commonly use.
for tool in sh env cat cp mv rm ln ls mkdir chmod chown id; do
  path=$(command -v "$tool") || continue
  case "$tool" in sh) copy_with_libs "$(readlink -f "$path")" /bin/sh ;; *) copy_with_libs "$(readlink -f "$path")" "/bin/$tool" ;; esac
done
mkdir -p "$root/usr/bin" "$root/etc/ssl/certs" "$root/tmp" "$root/root"
chmod 1777 "$root/tmp"
ln -s /bin/env "$root/usr/bin/env"
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"

config=(--env PATH=/usr/local/bin:/usr/bin:/bin --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)
if [ "$kind" = node ]; then
  user=node
  node=${NODE_BIN:-}
  if [ -z "$node" ]; then
    if [ -x "$here/node_modules/.bin/node" ]; then node=$here/node_modules/.bin/node; else node=$(command -v node); fi
  fi
  node=$(readlink -f "$node")
  major=$("$node" -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 24 ] || { echo "error: $node is Node $major; Node 24 or newer is needed (set NODE_BIN)" >&2; exit 1; }
  copy_with_libs "$node" /usr/local/bin/node
  # npm: beside this Node where it came with it, else the system's (it runs on any recent Node).
  npm_dir=$(dirname "$node")/../lib/node_modules/npm
  [ -d "$npm_dir" ] || npm_dir=$(dirname "$(readlink -f "$(command -v npm)")")/..
  mkdir -p "$root/usr/local/lib/node_modules"
  cp -a "$(readlink -f "$npm_dir")" "$root/usr/local/lib/node_modules/npm"
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
  # npm and Node read the CA bundle from here, so `npm ci` in a build reaches a registry behind TLS.
  config+=(--env "NODE_VERSION=$("$node" -p 'process.versions.node')" --env NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt --cmd node)
else
  user=app
  python=${PYTHON_BIN:-}
  if [ -z "$python" ]; then
    # 3.11 where pyenv has it: the pip mirrors' binary wheels (grpcio, psycopg-binary) are cp311.
    python=$(ls -d /root/.pyenv/versions/3.11.* 2>/dev/null | sort -V | tail -1)
    [ -n "$python" ] || python=$(ls -d /root/.pyenv/versions/3.* 2>/dev/null | sort -V | tail -1)
    python=${python:+$python/bin/python3}
    [ -n "$python" ] || python=$(command -v python3)
  fi
  python=$(readlink -f "$python")
  version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  stdlib=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  copy_with_libs "$python" /usr/local/bin/python3
  ln -s python3 "$root/usr/local/bin/python"
  # libpython where the loader looks without the build's rpath.
  for lib in $(ldd "$python" | grep -oE '/[^ ]*libpython[^ ]*'); do cp -L "$lib" "$root/lib/x86_64-linux-gnu/" 2>/dev/null || cp -L "$lib" "$root/lib/"; done
  mkdir -p "$root/usr/local/lib/python$version"
  # The standard library without its tests and caches, and pip (so a build can `pip install`).
  tar -C "$stdlib" --exclude=./test --exclude=__pycache__ --exclude=./site-packages --exclude=./dist-packages -cf - . | tar -C "$root/usr/local/lib/python$version" -xf -
  # The extension modules' own libraries (libssl, libz, libffi, …): ldd of the interpreter lists none of them.
  for so in "$stdlib"/lib-dynload/*.so; do copy_libs_of "$so"; done
  # What manylinux wheels' extension modules load beyond the interpreter's own (grpcio: librt,
  # libstdc++, ...), as a python:*-slim image has them.
  for name in librt.so.1 libpthread.so.0 libdl.so.2 libresolv.so.2 libm.so.6 libstdc++.so.6 libgcc_s.so.1 libz.so.1; do
    for dir in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
      if [ -e "$dir/$name" ]; then
        mkdir -p "$root$dir"
        [ -e "$root$dir/$name" ] || cp -L "$dir/$name" "$root$dir/$name"
        break
      fi
    done
  done
  site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$root/usr/local/lib/python$version/site-packages"
  if [ -d "$site/pip" ]; then cp -a "$site"/pip "$site"/pip-*.dist-info "$root/usr/local/lib/python$version/site-packages/"; fi
  printf '#!/bin/sh\nexec /usr/local/bin/python3 -m pip "$@"\n' >"$root/usr/local/bin/pip"
  chmod 755 "$root/usr/local/bin/pip"
  config+=(--env "PYTHON_VERSION=$version" --env PYTHONDONTWRITEBYTECODE=1 --cmd python3)
fi

# root and one non-root user (uid 1000), as the official images have, for the Dockerfile's USER.
mkdir -p "$root/home/$user"
chown 1000:1000 "$root/home/$user"
printf 'root:x:0:0:root:/root:/bin/sh\n%s:x:1000:1000::/home/%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' "$user" "$user" >"$root/etc/passwd"
printf 'root:x:0:\n%s:x:1000:\nnogroup:x:65534:\n' "$user" >"$root/etc/group"

container=$(buildah from scratch)
buildah add "$container" "$root" / >/dev/null
# (ownership: the home directory is chowned in the root before it is added; buildah add keeps it)
buildah config "${config[@]}" --label "org.opencontainers.image.description=stand-in $kind base image made by scripts/services/make-base-image.sh" "$container"
buildah commit -q "$container" "$ref" >/dev/null
echo "built $ref"

if [ "${NO_PUSH:-}" != 1 ]; then
  host=${ref%%/*}
  tls=()
  case "$host" in localhost|localhost:*|127.*|\[::1\]|\[::1\]:*) tls=(--tls-verify=false) ;; esac
  buildah push -q "${tls[@]}" "$ref" "docker://$ref"
  echo "pushed $ref"
fi
