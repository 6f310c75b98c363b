#!/usr/bin/env bash
# GPU check of the vLLM rollout path, on one CUDA machine (at most 300 s of install and 290 s of check: under 10 minutes):
#
#   1. a virtual environment .venv-gpu (GPU_VENV overrides) with tgsuite and its `gpu` extra (vLLM, which brings
#      the CUDA torch build it was compiled against; that is why this is not the CPU .venv of scripts/setup.sh),
#      installed with pip; when pip cannot reach an index (or a wheel is missing) the script says so, writes
#      gpu_check.json with status "install_failed" and exits 3. PIP_INDEX_URL / PIP_FIND_LINKS point pip at a
#      mirror or a wheel folder. GPU_PYTHON=/path/to/python skips the install and uses that interpreter (it must
#      import vllm and tgsuite's dependencies).
#   2. `python -m repro.gpu_check`: two RL steps of the `mini` model with rollout.engine = "vllm" (a colocated
#      vllm.LLM, weight sync after each optimizer step) and the trainer on one rank; it prints the engine's
#      tokens/s and the largest |sampler - trainer| log-prob difference of the sampled tokens.
#
# The JSON summary goes to $OUT/gpu_check.json when OUT is set, else runs/gpu_check/gpu_check.json.
# Exit status: 0 done, 2 no GPU or vLLM unusable, 3 the gpu extra could not be installed, 1 the check failed.
# Extra arguments are passed to `python -m repro.gpu_check` (see its --help), e.g. --steps 3 --dtype float32.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST="${OUT:-$ROOT/runs/gpu_check}"
VENV="${GPU_VENV:-$ROOT/.venv-gpu}"
log() { printf '[gpu_check] %s\n' "$*" >&2; }
summary() {  # status, reason: the JSON the python entry would have written
  mkdir -p "$DEST"
  printf '{"status": "%s", "reason": "%s"}\n' "$1" "$2" >"$DEST/gpu_check.json"
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
  log "no NVIDIA GPU (nvidia-smi -L lists none); this check needs one"
  summary unavailable "no NVIDIA GPU: nvidia-smi -L lists none"
  exit 2
fi
nvidia-smi -L >&2

if [ -n "${GPU_PYTHON:-}" ]; then
  PY="$GPU_PYTHON"
  log "using GPU_PYTHON=$PY (no install)"
else
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV" || { summary install_failed "python3 -m venv failed"; exit 3; }
  fi
  PY="$VENV/bin/python"
  if ! "$PY" -c 'import vllm, tgsuite' >/dev/null 2>&1; then
    log "installing tgsuite with the gpu extra into $VENV (vLLM and its CUDA torch: several GB)"
    if ! timeout 300 "$PY" -m pip install --quiet --disable-pip-version-check -e "$ROOT[gpu]"; then
      log "pip could not install the gpu extra (no package index reachable, or no matching wheel); set"
      log "PIP_INDEX_URL / PIP_FIND_LINKS to a mirror or a wheel folder, or GPU_PYTHON to an interpreter with vLLM"
      summary install_failed "pip install -e .[gpu] failed: no package index reachable or no matching wheel"
      exit 3
    fi
  fi
fi

OUT="$DEST" timeout 290 "$PY" -m repro.gpu_check --out "$DEST" "$@"
rc=$?
[ "$rc" = 124 ] && { log "the check ran past 290 s"; summary failed "timed out after 290 s"; }
exit "$rc"
