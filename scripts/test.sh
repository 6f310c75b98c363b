#!/usr/bin/env bash
# Run every test this machine can run: set up first (scripts/setup.sh: venv, Docker engine, base image), then
# pytest over tests/ with Docker tests included. Extra arguments go to pytest, e.g.
#   bash scripts/test.sh -m "not slow" -x        (everything under tests/, per pyproject testpaths)
#   bash scripts/test.sh tests/harness/test_images.py     (one file; tests/ mirrors the packages)
# With CI=true (as .ci/run sets), Docker tests FAIL instead of skipping when the engine or image is missing.
# pytest's exit 5 ("no tests collected") is an error here, never a pass.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rc=0
.venv/bin/python -m pytest "$@" || rc=$?  # no paths given: pyproject testpaths = tests/
if [ "$rc" = 5 ]; then
  echo "[test] error: pytest collected no tests (exit 5); a test run that checks nothing is a failure" >&2
  exit 1
fi
exit "$rc"
