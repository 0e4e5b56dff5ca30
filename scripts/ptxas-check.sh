#!/usr/bin/env bash
# Validates every embedded PTX file with ptxas (the PyPI wheel nvidia-cuda-nvcc==13.0.88),
# keeps ptxas' per-kernel register/stack/spill report under target/ptxas/, prints a summary and
# fails on any ptxas error, on any spill in an Atom kernel (purlin_atom_*), or on an Atom kernel
# that needs more registers than its block size allows. Files are checked in parallel, one per
# core.
# CUDA 13's ptxas no longer targets sm_70, so sm_70 PTX is assembled for sm_75, the oldest
# architecture it accepts (the PTX itself still says .target sm_70).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ptxas=$("$root/scripts/tools.sh" ptxas)
ptx_dir=${1:-$root/target/ptx}
out=$root/target/ptxas
mkdir -p "$out"
shopt -s nullglob
files=("$ptx_dir"/*.ptx)
[ ${#files[@]} -gt 0 ] || { echo "ptxas-check: no PTX under $ptx_dir (build the purlin crate first)" >&2; exit 1; }

check_one() {
  local f=$1 name arch gpu report kernels spills maxregs
  name=$(basename "$f" .ptx)
  arch=${name##*.}
  [ "$arch" = sm_70 ] && gpu=sm_75 || gpu=$arch
  report=$out/$name.txt
  if ! "$ptxas" -arch="$gpu" -v "$f" -o "$out/$name.cubin" >"$report" 2>&1; then
    echo "ptxas-check: ptxas -arch=$gpu rejected $f:"; grep -m 20 -i error "$report"; return 1
  fi
  rm -f "$out/$name.cubin"
  # One line per entry: name registers stack spill_stores spill_loads.
  awk -v file="$name" '
    /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); fn = substr($0, RSTART+1, RLENGTH-2); want = 1; next }
    want && /bytes stack frame/ { stack = $1; st = $5; ld = $9; next }
    want && /Used [0-9]+ registers/ { match($0, /Used [0-9]+/); regs = substr($0, RSTART+5, RLENGTH-5);
      printf "%-24s %-44s regs %3d stack %4d spill %d/%d\n", file, fn, regs, stack, st, ld; want = 0 }
  ' "$report" | sort -k2 >"$out/$name.summary"
  kernels=$(wc -l <"$out/$name.summary")
  spills=$(awk '$2 ~ /^purlin_atom_/ { split($8, s, "/"); if (s[1] + s[2] > 0) print }' "$out/$name.summary")
  if [ -n "$spills" ]; then echo "ptxas-check: spills in Atom kernels of $name:"; echo "$spills"; return 1; fi
  # Sm70 Atom kernels launch 512 threads: more than 128 registers each and they cannot launch.
  heavy=$(awk '$2 ~ /^purlin_atom_.*sm70/ && $4 > 128 { print }' "$out/$name.summary")
  if [ -n "$heavy" ]; then echo "ptxas-check: 512-thread Sm70 Atom kernels of $name need > 128 registers:"; echo "$heavy"; return 1; fi
  maxregs=$(awk '{ if ($4 > m) m = $4 } END { print m + 0 }' "$out/$name.summary")
  echo "ptxas-check: $name OK for $gpu: $kernels kernels, max $maxregs registers (report: target/ptxas/$name.summary)"
}

jobs_max=$(nproc 2>/dev/null || echo 2)
pids=()
status=0
for f in "${files[@]}"; do
  check_one "$f" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs_max" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
