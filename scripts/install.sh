#!/usr/bin/env bash
# Set up the workbench in ./.venv on a fresh machine.
#   bash scripts/install.sh          the app's dependencies (CPU torch 2.13.0 first)
#   bash scripts/install.sh --dev    + test dependencies and Debian's chromium for browser tests
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch first, pinned: a plain `torch` requirement would pull a multi-GB CUDA build.
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
if [ "${1:-}" = "--dev" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  if ! command -v chromium >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
  fi
else
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt
fi
.venv/bin/python -m pip check
