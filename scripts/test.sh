#!/usr/bin/env bash
# The whole test suite: installs what is missing, fetches the pinned data, builds, runs CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --data
bash scripts/build.sh
cd build
ctest --output-on-failure -j"$(nproc)" "$@"
