#!/usr/bin/env bash
# The main job: set up this machine (idempotent), check it, then run the mini reproduction end to end.
# It ends with the verdict and the path of the HTML report. Re-running resumes where it stopped.
#
#   PRESET=smoke bash scripts/main.sh     # a few minutes, every stage at tiny sizes
#   bash scripts/main.sh                  # PRESET=mini: the reproduction (arms grpo and tg, 3 seeds each)
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET="${PRESET:-mini}"
OUT="${OUT:-runs/$PRESET}"
bash scripts/setup.sh
.venv/bin/tgsuite doctor
exec .venv/bin/tgsuite reproduce --preset "$PRESET" --out "$OUT"
