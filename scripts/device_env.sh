# Sourced by the GPU scripts (scripts/gpu_check.sh): makes pkg-config find jansson and PCRE2 on
# a GPU machine that has their runtimes but not their -dev files, from .deps/root (prepared here
# by scripts/device_deps.sh and carried by the device tool), and OpenBLAS where the machine has
# no openblas.pc. Expects ROOT (the repository) and LOGS (a log folder) to be set.
DEPS=$ROOT/.deps
if ! command -v pkg-config >/dev/null 2>&1 && [ -x "$DEPS/root/usr/bin/pkgconf" ]; then
  mkdir -p "$DEPS/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$DEPS/root/usr/lib/x86_64-linux-gnu" "$DEPS/root/usr/bin/pkgconf" > "$DEPS/bin/pkg-config"
  chmod +x "$DEPS/bin/pkg-config"
  export PATH=$DEPS/bin:$PATH
  echo "pkg-config: using the carried pkgconf" | tee -a "$LOGS/env.log"
fi
PCDIR=$DEPS/pc
mkdir -p "$PCDIR"
for mod in jansson libpcre2-8; do
  pkg-config --exists "$mod" 2>/dev/null && continue
  src=$DEPS/root/usr/lib/x86_64-linux-gnu/pkgconfig/$mod.pc
  if [ -f "$src" ]; then
    sed "s|^prefix=.*|prefix=$DEPS/root/usr|" "$src" > "$PCDIR/$mod.pc"
    echo "pkg-config: $mod from .deps/root" | tee -a "$LOGS/env.log"
  else
    echo "pkg-config: $mod missing and not carried (run scripts/device_deps.sh here, carry .deps/root)" | tee -a "$LOGS/env.log"
  fi
done
# the unpacked -dev .so links point at runtimes that were not carried: point them at the
# machine's own runtime (same soname), or drop them so the static archive is used
for link in "$DEPS"/root/usr/lib/x86_64-linux-gnu/lib*.so; do
  [ -L "$link" ] || continue
  [ -e "$link" ] && continue
  base=$(basename "$link")
  sys=$(ls /usr/lib/x86_64-linux-gnu/"$base".[0-9]* 2>/dev/null | head -1)
  if [ -n "$sys" ]; then ln -sfn "$sys" "$link"; else rm -f "$link"; fi
done
if ! pkg-config --exists openblas 2>/dev/null; then
  lib=$(ls /usr/lib/x86_64-linux-gnu/libopenblas.so* /usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so* 2>/dev/null | head -1)
  hdr=$(ls -d /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include 2>/dev/null |
        while read -r d; do [ -f "$d/cblas.h" ] && echo "$d" && break; done)
  if [ -n "$lib" ] && [ -n "$hdr" ]; then
    mkdir -p "$DEPS/lib"
    ln -sfn "$lib" "$DEPS/lib/libopenblas.so"
    printf 'Name: openblas\nDescription: OpenBLAS found on this machine\nVersion: 0\nLibs: -L%s -lopenblas\nCflags: -I%s\n' \
      "$DEPS/lib" "$hdr" > "$PCDIR/openblas.pc"
    echo "pkg-config: openblas from $lib, $hdr" | tee -a "$LOGS/env.log"
  fi
fi
export PKG_CONFIG_PATH=$PCDIR${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
for mod in openblas jansson libpcre2-8; do
  echo "pkg-config $mod: $(pkg-config --modversion "$mod" 2>&1)"
done | tee -a "$LOGS/env.log"

