#!/usr/bin/env bash
# Set up tgsuite on a fresh Debian machine (idempotent: a second run only checks and returns quickly).
#
#   1. a virtual environment in .venv with torch 2.13.0 installed FIRST (the CPU build on a CPU machine;
#      installing anything that needs torch before it would pull a multi-GB CUDA build),
#   2. tgsuite itself (editable) with the dev extra,
#   3. Debian packages: docker.io, debootstrap (offline base images) and chromium (report tests),
#   4. a Docker engine: dockerd --bridge=none --iptables=false is started when none answers,
#   5. the offline base image, built when it is missing.
#
# Options (environment): TGSUITE_SKIP_DOCKER=1 skips 3-5's Docker parts; TGSUITE_SKIP_BROWSER=1 skips chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
log() { printf '[setup] %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- 1-2. Python environment -------------------------------------------------------------------
stamp="$VENV/.tgsuite-installed"
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment in .venv"
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing torch 2.13.0 first (CPU build here), then tgsuite[dev]"
  "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  "$VENV/bin/python" -m pip install -q -e ".[dev]"
  echo "$want" > "$stamp"
else
  log "python environment up to date"
fi

# --- 3. Debian packages --------------------------------------------------------------------------
need=()
if [ "${TGSUITE_SKIP_DOCKER:-0}" != 1 ]; then
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
fi
if [ "${TGSUITE_SKIP_BROWSER:-0}" != 1 ]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  log "installing Debian packages: ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- 4-5. Docker engine and base image ------------------------------------------------------------
if [ "${TGSUITE_SKIP_DOCKER:-0}" != 1 ]; then
  if ! "$VENV/bin/python" -c "import docker; docker.from_env(timeout=5).ping()" >/dev/null 2>&1; then
    log "no Docker engine answers: starting dockerd --bridge=none --iptables=false"
    mkdir -p "$ROOT/.cache"
    as_root bash -c "nohup setsid dockerd --bridge=none --iptables=false >'$ROOT/.cache/dockerd.log' 2>&1 &"
    for _ in $(seq 1 60); do
      "$VENV/bin/python" -c "import docker; docker.from_env(timeout=5).ping()" >/dev/null 2>&1 && break
      sleep 1
    done
    "$VENV/bin/python" -c "import docker; docker.from_env(timeout=5).ping()" >/dev/null 2>&1 \
      || { log "dockerd did not come up; see .cache/dockerd.log"; exit 1; }
  fi
  # The offline base image (debootstrap + docker import, a few minutes the first time; < 2 s when present).
  # Called through the module, not the `tgsuite` script, so set-up does not depend on every CLI command importing.
  # Building needs root (debootstrap); finding an existing image does not.
  img=(env PYTHONPATH="$ROOT" "$VENV/bin/python" -m tgsuite.commands.images build)
  if [ "$(id -u)" = 0 ]; then out=$("${img[@]}") || out=""; else out=$("${img[@]}" 2>/dev/null || as_root "${img[@]}") || out=""; fi
  [ -n "$out" ] || { log "base image build failed (message above); fix it, then rerun scripts/setup.sh"; exit 1; }
  log "base image: $out"
fi
log "done"
