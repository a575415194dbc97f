#!/usr/bin/env bash
# Set up the workbench in ./.venv on a fresh machine.
#   bash scripts/install.sh          the app's dependencies (CPU torch 2.13.0 first)
#   bash scripts/install.sh --dev    + test dependencies and Debian's chromium (and its headless shell) for browser tests
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
pip() {  # quiet, and without the local index's "Location ... is ignored" noise
  .venv/bin/python -m pip -q --disable-pip-version-check "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }
  return "${PIPESTATUS[0]}"
}

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# torch first, pinned: a plain `torch` requirement would pull a multi-GB CUDA build.
pip install torch==2.13.0
if [ "${1:-}" = "--dev" ]; then
  pip install -r requirements-dev.txt
  # the headless shell drives the browser tests (a page open costs less CPU); chromium, the same
  # build with its user interface, is the fallback and what a developer opens the app in
  if ! command -v chromium >/dev/null 2>&1 || ! command -v chromium-headless-shell >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = "0" ] || SUDO="sudo"
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium chromium-headless-shell >/dev/null
  fi
else
  pip install -r requirements.txt
fi
.venv/bin/python -m pip check
