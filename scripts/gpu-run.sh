#!/usr/bin/env bash
# Runs the GPU suite from a bundle made by scripts/gpu-bundle.sh. Needs the NVIDIA driver, no
# Rust. Usage: ./run.sh [--bench] [test filter]. Logs under $OUT (or ./logs); a summary last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
logs=${OUT:-$here/logs}
mkdir -p "$logs"
bench=0
if [ "${1:-}" = "--bench" ]; then bench=1; shift; fi
filter=${1:-}
# Multicast / NVLS stays off (DESIGN.md, Safety).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
summary=$logs/summary.txt
: >"$summary"
echo "commit $(cat "$here/COMMIT" 2>/dev/null)" | tee -a "$summary"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu /' | tee -a "$summary"
status=0
# The GPU suite is the test-gpu binary (CPU tests are CI's); each binary gets a time bound.
for t in "$here"/bin/test-gpu "$here"/bin/example-*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  start=$(date +%s)
  case $name in
    test-*) timeout "${PURLIN_GPU_TEST_TIMEOUT:-420}" "$t" --test-threads=1 $filter >"$logs/$name.log" 2>&1 ;;
    *) timeout 120 "$t" >"$logs/$name.log" 2>&1 ;;
  esac
  rc=$?
  secs=$(( $(date +%s) - start ))
  res=$(grep -E '^test result:|^OK' "$logs/$name.log" | tail -1)
  skipped=$(grep -c '^SKIPPED' "$logs/$name.log")
  echo "$name rc=$rc ${secs}s skipped=$skipped $res" | tee -a "$summary"
  grep -E '^test .* FAILED|panicked' "$logs/$name.log" | head -5 | tee -a "$summary"
  grep -E 'cases run' "$logs/$name.log" | tee -a "$summary"
  [ $rc -eq 0 ] || status=1
done
if [ $bench = 1 ]; then
  for b in "$here"/bin/purlin-atom-bench; do
    [ -x "$b" ] || continue
    "$b" >"$logs/atom_bench.md" 2>&1 || status=1
    cat "$logs/atom_bench.md"
  done
fi
echo "---- summary"; cat "$summary"
exit $status
