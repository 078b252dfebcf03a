#!/usr/bin/env bash
# Make a fresh Debian machine ready for swepipe: Docker engine running, Python environment, base image.
# Idempotent: every step is skipped when already done. Run as root (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v git >/dev/null || missing+=(git)
command -v chromium >/dev/null || missing+=(chromium)  # the browser test of the report's task pages
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "setup: starting dockerd (log: /tmp/swepipe-dockerd.log)"
  nohup dockerd >/tmp/swepipe-dockerd.log 2>&1 &
  for _ in $(seq 90); do docker info >/dev/null 2>&1 && break; sleep 1; done
  if ! docker info >/dev/null 2>&1; then
    echo "setup: dockerd did not come up:" >&2
    tail -n 40 /tmp/swepipe-dockerd.log >&2
    exit 1
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
# The local model's server is built from source. A native build (-march=native) can carry instructions, such as
# AMX tiles, that trap (SIGILL) on a machine whose CPU advertises them but whose kernel does not grant them: the
# server then answers /v1/models and dies on its first completion. GGML_NATIVE=OFF builds the portable x86-64
# set (AVX2/FMA kept). The stamp names the version built so; a venv built any other way is rebuilt once.
llama_version=0.3.36
llama_stamp=.venv/.llama-cpp-python-portable-$llama_version
if [ ! -f "$llama_stamp" ]; then
  echo "setup: building llama-cpp-python $llama_version without native CPU instructions (a few minutes)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/pip install -q --no-cache-dir --force-reinstall \
    "llama-cpp-python[server]==$llama_version" 2> >(grep -v "^WARNING: Location" >&2)
  touch "$llama_stamp"
fi
echo "setup: installing swepipe into .venv"
# pip's notes about this machine's extra package indexes are noise; real errors still stop the script.
.venv/bin/pip install -q -e '.[test,local,ray]' 2> >(grep -v "^WARNING: Location" >&2)

.venv/bin/swepipe images build
