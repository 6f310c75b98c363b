#!/usr/bin/env bash
# The main job: set up this machine (idempotent), check it, then run the mini reproduction end to end.
# It ends with the verdict and the path of the HTML report. Re-running resumes where it stopped.
#
#   bash scripts/main.sh                  # PRESET=mini (default): arms grpo and tg, 5 seeds each, 40 held-out
#                                         # tasks in Docker; 38 min at 14273ec on a quiet 2-core machine
#                                         # (every measured run: docs/RESULTS.md)
#   PRESET=smoke bash scripts/main.sh     # every stage at tiny sizes, ~2-3 min
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET="${PRESET:-mini}"
OUT="${OUT:-runs/$PRESET}"
bash scripts/setup.sh
.venv/bin/tgsuite doctor
exec .venv/bin/tgsuite reproduce --preset "$PRESET" --out "$OUT"
