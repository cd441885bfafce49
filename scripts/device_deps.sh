#!/usr/bin/env bash
# Prepares, on this machine, the build dependencies that the GPU machines lack, to be carried
# there by the device tool (they reach no package registry). Those machines have the jansson and
# PCRE2 runtimes (libjansson.so.4, libpcre2-8.so.0) but not their headers and pkg-config files.
#
#   bash scripts/device_deps.sh     downloads the .debs into .deps/debs and unpacks them into
#                                   .deps/root (both ignored by git); then name .deps/root in
#                                   the run call's carry. scripts/cuda_check.sh uses it there.
# pkgconf is fetched too, used there only if the machine has no pkg-config of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="libjansson-dev libpcre2-dev pkgconf pkgconf-bin libpkgconf3"
mkdir -p .deps/debs
(cd .deps/debs && rm -f ./*.deb && apt-get download $PKGS 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
for p in $PKGS; do
  ls .deps/debs/"${p}"_*.deb >/dev/null 2>&1 || { echo "device_deps: failed to download $p" >&2; exit 1; }
done
rm -rf .deps/root
mkdir -p .deps/root
for f in .deps/debs/*.deb; do dpkg -x "$f" .deps/root; done
rm -rf .deps/root/usr/share/man .deps/root/usr/share/doc
echo "device_deps: unpacked $(ls .deps/debs | wc -l) packages into .deps/root ($(du -sh .deps/root | cut -f1))"
