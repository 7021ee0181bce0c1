#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run it.
#   bash scripts/test.sh [pytest args]
# Needs nothing beside the checkout: the real traces the tests read are in fixtures/traces/real/.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

# Headless Chromium + driver for the browser test of the HTML report (Debian packages).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# A C++ compiler and Python's headers: torch.compile's inductor builds its CPU kernels with them
# (tests/e2e/test_compile_run.py compiles real programs).
if ! command -v g++ >/dev/null 2>&1 || \
   ! python3 -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))'; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++ python3-dev >/dev/null
fi

# torch 2.13.0 for the `perfsleuth run` / profile() tests (`analyze` never needs it). On Linux PyPI's wheel is the
# CUDA build (several GB): install_torch.py asks pip what it would install (--dry-run --report) and, on a machine
# without an NVIDIA GPU, takes the CPU build from download.pytorch.org instead. It prints what it decided.
python3 scripts/install_torch.py
python3 -m pip install -q -e '.[test,hta,dask]'

set +e
python3 -m pytest "$@"
rc=$?
set -e
if [ "$rc" = "5" ]; then
  echo "scripts/test.sh: pytest collected no tests -- that is a failure" >&2
  exit 1
fi
exit "$rc"
