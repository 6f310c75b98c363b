#!/usr/bin/env bash
# Set up tgsuite on a fresh Debian machine (idempotent: a second run only checks and returns quickly).
#
#   0. what venv needs on Debian: python3 and python3-venv (Debian ships venv's ensurepip separately, so
#      `python3 -m venv` fails on a minimal bookworm without it) and ca-certificates, installed when missing,
#   1. a virtual environment in .venv with torch 2.13.0 installed FIRST, the build chosen by TGSUITE_TORCH
#      (installing anything that needs torch before it would pull PyPI's multi-GB CUDA build),
#   2. tgsuite itself (editable) with the dev extra,
#   3. Debian packages: docker.io, debootstrap (offline base images) and chromium (report tests),
#   4. a Docker engine: dockerd --bridge=none --iptables=false is started when none answers,
#   5. the offline base image, built when it is missing.
#
# Options (environment):
#   TGSUITE_TORCH=auto|cpu|cuda   which torch build (default auto: cuda when `nvidia-smi -L` lists a GPU, else cpu).
#       cpu  = the 2.13.0+cpu wheel: from your pip index when it has one, else https://download.pytorch.org/whl/cpu
#              (TGSUITE_TORCH_INDEX overrides that URL); ~200 MB.
#       cuda = PyPI's default Linux wheel (bundles its CUDA runtime; multi-GB). Switching rebuilds the venv's packages.
#       `tgsuite doctor` prints the build that is installed ("2.13.0+cpu (cpu build)" / "(cuda 12.x build)").
#   TGSUITE_DEBS=DIR     step 0 installs the .deb files in DIR with dpkg (offline) instead of using apt-get.
#   TGSUITE_SETUP_UNTIL=venv   stop after step 0 and creating .venv (checks the system prerequisites only).
#   TGSUITE_SKIP_DOCKER=1 skips 3-5's Docker parts; TGSUITE_SKIP_BROWSER=1 skips chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
log() { printf '[setup] %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# --- 0. what venv needs ----------------------------------------------------------------------------
venv_ready() { command -v "$PY" >/dev/null 2>&1 && "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; }
if ! venv_ready; then
  if [ -n "${TGSUITE_DEBS:-}" ]; then
    log "installing python3-venv and what it needs from $TGSUITE_DEBS (offline, dpkg -i)"
    as_root dpkg -i "$TGSUITE_DEBS"/*.deb >/dev/null
  else
    log "installing python3 python3-venv ca-certificates (venv's ensurepip is a separate Debian package)"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends \
      python3 python3-venv ca-certificates >/dev/null
  fi
  venv_ready || { log "$PY -m venv still cannot work (no ensurepip); fix: apt-get install python3-venv"; exit 1; }
fi

# --- 1-2. Python environment -------------------------------------------------------------------
case "${TGSUITE_TORCH:-auto}" in
  cpu | cuda) TORCH_BUILD="$TGSUITE_TORCH" ;;
  auto) if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
          TORCH_BUILD=cuda; else TORCH_BUILD=cpu; fi ;;
  *) log "TGSUITE_TORCH=${TGSUITE_TORCH}: use cpu, cuda or auto"; exit 2 ;;
esac
stamp="$VENV/.tgsuite-installed"
want=$( (cat pyproject.toml scripts/setup.sh; echo "torch=$TORCH_BUILD") | sha256sum | cut -c1-16)
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  log "creating virtual environment in .venv"   # --clear: a venv left without pip by an earlier failure is redone
  "$PY" -m venv --clear "$VENV"
fi
[ "${TGSUITE_SETUP_UNTIL:-}" = venv ] && { log "stopping after the venv step (TGSUITE_SETUP_UNTIL=venv)"; exit 0; }
install_torch() {
  if [ "$TORCH_BUILD" = cpu ]; then
    "$VENV/bin/python" -m pip install -q "torch==2.13.0+cpu" 2>/dev/null || "$VENV/bin/python" -m pip install -q \
      "torch==2.13.0+cpu" --extra-index-url "${TGSUITE_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
  else
    "$VENV/bin/python" -m pip install -q "torch==2.13.0"
  fi
  local got
  # -W ignore: numpy is not installed yet, and torch warns about that on import (harmless here)
  got=$("$VENV/bin/python" -W ignore -c 'import torch; print("cuda" if torch.version.cuda else "cpu")')
  [ "$got" = "$TORCH_BUILD" ] || { log "pip installed the $got build of torch, not $TORCH_BUILD; fix: point pip at an \
index with the $TORCH_BUILD wheel (TGSUITE_TORCH_INDEX for cpu) or choose TGSUITE_TORCH=$got"; exit 1; }
}
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing torch 2.13.0 first ($TORCH_BUILD build; TGSUITE_TORCH=cpu|cuda chooses), then tgsuite[dev]"
  "$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
  install_torch
  "$VENV/bin/python" -m pip install -q -e ".[dev]"
  # swebench's log parsers, so that their tests run here: its pure-Python modules only (--no-deps; an extra
  # would pull its whole dependency list, and harness.swebench_compat needs none of it)
  "$VENV/bin/python" -m pip install -q --no-deps "swebench==5.0.2"
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
