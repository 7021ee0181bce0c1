#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run it.
#   bash scripts/test.sh [pytest args]
# Needs ../shared/traces beside the checkout (the real GPU traces the integration tests read).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi

# Headless Chromium + driver for the browser test of the HTML report (Debian packages).
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# torch is pinned to the CPU build (an unpinned torch pulls a multi-GB CUDA build); `analyze` itself never needs it.
python3 -m pip install -q -e '.[test,hta,dask]' 'torch==2.13.0'

set +e
python3 -m pytest "$@"
rc=$?
set -e
if [ "$rc" = "5" ]; then
  echo "scripts/test.sh: pytest collected no tests -- that is a failure" >&2
  exit 1
fi
exit "$rc"
