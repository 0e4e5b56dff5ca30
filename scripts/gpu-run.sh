#!/usr/bin/env bash
# Runs the GPU suite from a bundle made by scripts/gpu-bundle.sh. Needs the NVIDIA driver, no
# Rust. Usage: ./run.sh [--bench|--tune] [test filter]. Logs under $OUT (or ./logs); a summary
# last. --bench adds the Atom benchmark and every collective's benchmark (8 ranks on the virtual
# node, a --check pass, AllReduce/AllGather plots); --tune runs purlin-tune and writes the
# table to $OUT.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Everything is written to a scratch folder; at the end the device tool's $OUT (which brings back
# at most 8 files) gets one archive of it plus the few files worth looking at directly.
out=${OUT:-$here/logs}
logs=$(mktemp -d)
mkdir -p "$out"
bench=0
tune=0
if [ "${1:-}" = "--bench" ]; then bench=1; shift; fi
if [ "${1:-}" = "--tune" ]; then tune=1; shift; fi
filter=${1:-}
# Multicast / NVLS stays off (DESIGN.md, Safety).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The virtual node runs 8 ranks' kernels (plus side streams) at once: give every stream its own
# hardware queue so a waiting kernel never blocks another rank's work queued behind it.
export CUDA_DEVICE_MAX_CONNECTIONS=32
summary=$logs/summary.txt
: >"$summary"
echo "commit $(cat "$here/COMMIT" 2>/dev/null)" | tee -a "$summary"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu /' | tee -a "$summary"
status=0
# The GPU suite is the test-gpu binary (CPU tests are CI's); each binary gets a time bound.
for t in "$here"/bin/test-gpu "$here"/bin/example-*; do
  [ -x "$t" ] || continue
  case $t in *-mpi) continue ;; esac
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
if [ -x "$here/bin/example-p2p-mpi" ] && command -v mpirun >/dev/null; then
  "$here/gpu-mpi.sh" run 64M >"$logs/example-p2p-mpi.log" 2>&1 && echo "example-p2p-mpi (mpirun -n 2) OK" | tee -a "$summary" \
    || { echo "example-p2p-mpi (mpirun -n 2) FAILED" | tee -a "$summary"; status=1; }
fi
if [ $bench = 1 ]; then
  "$here/bin/purlin-atom-bench" >"$logs/atom_bench.md" 2>&1 || status=1
  cat "$logs/atom_bench.md"
  for c in ar ag rs a2a agv rsv a2av; do
    # Correctness at every size of a shorter sweep, then the timed sweep (graphs of 8).
    timeout 300 "$here/bin/purlin-bench" "$c" 1K 16M 0 2 1 --ranks 8 --check --csv >"$logs/check_$c.csv" 2>&1 \
      || { echo "purlin-bench $c --check FAILED" | tee -a "$summary"; status=1; }
    plot=""
    case $c in ar|ag) plot="--plot $logs/${c}_busbw.png" ;; esac
    timeout 300 "$here/bin/purlin-bench" "$c" 8 256M 8 20 4 --ranks 8 $plot >"$logs/bench_$c.txt" 2>&1 || status=1
    tail -n +1 "$logs/bench_$c.txt" | grep -v '^#' | tail -3 | sed "s/^/$c /" | tee -a "$summary"
  done
  timeout 300 "$here/bin/purlin-bench" ar 1M 256M 8 20 4 --ranks 8 --deterministic >"$logs/bench_ar_deterministic.txt" 2>&1 || status=1
fi
if [ $tune = 1 ]; then
  timeout 580 "$here/bin/purlin-tune" --ranks 2,4,8 --out "$logs/sm90.table" >"$logs/tune.log" 2>&1 || status=1
  tail -3 "$logs/tune.log" | tee -a "$summary"
fi
tar czf "$out/logs.tgz" -C "$logs" .
for keep in summary.txt atom_bench.md all_reduce_busbw.png ar_busbw.png ag_busbw.png sm90.table; do
  [ -f "$logs/$keep" ] && cp "$logs/$keep" "$out/"
done
echo "---- summary (full logs: logs.tgz)"; cat "$summary"
exit $status
