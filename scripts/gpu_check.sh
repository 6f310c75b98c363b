#!/usr/bin/env bash
# GPU check of the paper-scale path on one CUDA GPU, in one command that ends within 8 minutes.
#
# It runs on a machine as it is: no network, its own python3 (3.12) with a CUDA torch (2.11 or later), transformers
# 5.x, peft, accelerate, safetensors and tokenizers, and this project's tree (not installed: PYTHONPATH=<tree>).
# Nothing is downloaded. The one project dependency such a machine lacks is pydantic: carry its wheels in .whl/ at
# the tree's root (2.8 MiB; .whl/ is git-ignored), made on any machine with pip:
#
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#       pydantic==2.14.4 pydantic-core==2.50.5 typing-inspection==0.4.5 annotated-types==0.8.0 \
#       typing-extensions==4.16.0
#
# (pydantic-core's wheels are tagged manylinux_2_17, which a manylinux_2_28 machine accepts; pydantic pins the
# pydantic-core version it needs, so keep the pair of this project's .venv: `pip list | grep pydantic`;
# typing-extensions because pydantic needs a newer one than torch's may be. Checked: these five install with
# python3.12 -m pip install --no-index --no-deps --target and `import pydantic` works from that folder.)
# When `import pydantic` fails, the script installs them with
#   python3 -m pip install --no-index --no-deps --target /tmp/tgsuite-gpu-site .whl/*.whl
# (without pip: it unzips them there) and puts that folder on PYTHONPATH. vLLM is not needed (its wheel is far over what can be carried): the vllm part
# says "skipped: no vLLM" without it.
#
# Then `python -m repro.gpu_check` (see its --help) runs, in order, printing one line each and rewriting
# $OUT/gpu_check.json after every part: rl (RL steps of the mini model, arm tg, through train_rl with the hf_sampler
# engine; sampler-vs-trainer log-prob bound at T=0.7, top-p=0.7), throughput (tokens/s and MFU of a ~0.5B Qwen3,
# bf16-mixed, packed), kl (chunked vs naive full-vocabulary KL at V=151,936, N=16,384), lora (one LoRA step),
# fsdp (FSDP2 on one rank through train_rl), vllm (if importable).
#
# Environment: OUT (default runs/gpu_check; it receives gpu_check.json only, the parts' runs go to a temporary
# directory), GPU_PYTHON (default python3), GPU_CHECK_LIMIT_S (default 460: the
# check is stopped then, so with start-up the command ends within 8 minutes). Extra arguments go to
# `python -m repro.gpu_check`, e.g. --parts rl,kl or --plan.
#
# Exit status: 0 every part ok or skipped; 1 a part failed (the JSON names it; the other parts still ran);
# 2 no NVIDIA GPU or no CUDA in torch; 3 a dependency is missing (pydantic without carried wheels, or the wheels
# would not install); 124 the check ran past GPU_CHECK_LIMIT_S (the parts that finished are in the JSON).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEST="${OUT:-$ROOT/runs/gpu_check}"
PY="${GPU_PYTHON:-python3}"
LIMIT="${GPU_CHECK_LIMIT_S:-460}"
SITE="${TMPDIR:-/tmp}/tgsuite-gpu-site"
log() { printf '[gpu_check] %s\n' "$*" >&2; }
summary() {  # status, reason: written when the python entry cannot write its own
  mkdir -p "$DEST"
  printf '{"status": "%s", "reason": "%s"}\n' "$1" "$2" >"$DEST/gpu_check.json"
}

case " $* " in *" --plan "* | *" --help "* | *" -h "*) DRY=1 ;; *) DRY=0 ;; esac  # no GPU or wheels needed
if [ "$DRY" = 0 ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
    log "no NVIDIA GPU (nvidia-smi -L lists none); this check needs one"
    summary unavailable "no NVIDIA GPU: nvidia-smi -L lists none"
    exit 2
  fi
  nvidia-smi -L >&2
fi

if [ "$DRY" = 0 ] && ! "$PY" -c 'import pydantic' >/dev/null 2>&1; then
  if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    log "pydantic is not importable: installing the carried wheels of .whl/ into $SITE"
    if "$PY" -m pip --version >/dev/null 2>&1; then
      "$PY" -m pip install --quiet --disable-pip-version-check --no-index --no-deps --target "$SITE" "$ROOT"/.whl/*.whl
    else  # no pip: a wheel is a zip of the files to put on the path (these five have no install-time scripts)
      "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
        "$SITE" "$ROOT"/.whl/*.whl
    fi
    if ! PYTHONPATH="$SITE" "$PY" -c 'import pydantic' >/dev/null 2>&1; then
      summary missing_dependency "the wheels of .whl/ did not give an importable pydantic (wrong Python version?)"
      exit 3
    fi
  else
    log "pydantic is not importable and .whl/ holds no wheels; make them as this script's header says"
    summary missing_dependency "pydantic is not importable and .whl/ holds no wheels (see scripts/gpu_check.sh)"
    exit 3
  fi
fi
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false

timeout --kill-after=15 "$LIMIT" "$PY" -m repro.gpu_check --out "$DEST" "$@"
rc=$?
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
  log "the check ran past ${LIMIT} s; the parts that finished are in $DEST/gpu_check.json"
  "$PY" - "$DEST/gpu_check.json" "$LIMIT" <<'EOF' || summary timed_out "ran past the time limit"
import json, sys
path, limit = sys.argv[1], sys.argv[2]
data = json.load(open(path))
data.update(status="timed_out", reason=f"stopped after {limit} s")
json.dump(data, open(path, "w"), indent=2)
EOF
  exit 124
fi
exit "$rc"
