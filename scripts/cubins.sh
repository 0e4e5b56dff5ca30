#!/usr/bin/env bash
# Precompiles for sm_90 (the GPU the suite runs on) every sm_70, sm_80 and sm_90 PTX file of
# PTX_DIR (the Atom tests open the GPU once per architecture, which loads that architecture's
# modules: without a cubin the driver JIT-compiles each for minutes, more than the test's
# bound), into OUT_DIR with ptxas: <stem>.cubin beside
# <stem>.fingerprint, the FNV-1a hash of the PTX it was made from (purlin::ptx::fingerprint),
# so a GPU machine loads them instead of JIT-compiling the PTX (PURLIN_CUBIN_DIR, see
# purlin::ptx::precompiled) and ignores a stale one. CUBIN_ARCHS (default "70 80 90") names the
# PTX architectures to precompile: "90" alone takes about a quarter of the time and serves
# everything but the Atom tests' sm_70/sm_80 modules (which the driver then JIT-compiles).
#     scripts/cubins.sh PTX_DIR OUT_DIR
#     CUBIN_ARCHS=90 scripts/cubins.sh PTX_DIR OUT_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ptx_dir=$1 out=$2
ptxas=$("$root/scripts/tools.sh" ptxas)
mkdir -p "$out"
archs=${CUBIN_ARCHS:-70 80 90}
for arch in $archs; do
  case $arch in
    70 | 80 | 90) ;;
    *) echo "cubins.sh: CUBIN_ARCHS: $arch is not one of 70, 80, 90" >&2; exit 2 ;;
  esac
done
ptx=()
for arch in $archs; do ptx+=("$ptx_dir"/*.sm_"$arch".ptx); done
for f in "${ptx[@]}"; do
  [ -f "$f" ] || continue
  stem=$(basename "$f" .ptx)
  "$ptxas" -arch=sm_90 "$f" -o "$out/$stem.cubin" &
  python3 -c 'import sys
h = 0xcbf29ce484222325
for b in open(sys.argv[1], "rb").read():
    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
print("%016x" % h)' "$f" >"$out/$stem.fingerprint"
done
wait
