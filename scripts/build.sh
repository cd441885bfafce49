#!/usr/bin/env bash
# Configure and build loom into build/ (Release). Extra arguments go to cmake's configure step.
# LOOM_WERROR=1 (set by CI) turns warnings into errors.
set -euo pipefail
cd "$(dirname "$0")/.."
werror=OFF
if [ "${LOOM_WERROR:-${CI:-}}" = "1" ] || [ "${CI:-}" = "true" ]; then werror=ON; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLOOM_WERROR=$werror "$@" > build.log 2>&1 || { cat build.log; exit 1; }
cmake --build build -j"$(nproc)" >> build.log 2>&1 || { grep -E "error|warning" build.log | head -50; echo "build failed: see build.log"; exit 1; }
rm -f build.log
echo "built build/loom"
