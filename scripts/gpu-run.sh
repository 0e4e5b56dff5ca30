#!/usr/bin/env bash
# Runs the GPU suite from a bundle made by scripts/gpu-bundle.sh. Needs the NVIDIA driver, no
# Rust. Usage:
#     ./run.sh [--tests] [--bench] [--tune] [--latency] [--classic] [test filter]
# With no mode flag it runs the tests (--tests). --latency: every collective from 16 B (128 B
# for the split forms) to 1 MiB, checked, timed with all ranks' calls in one graph at worlds 1,
# 2, 4 and 8 and one graph per rank at world 8, each beside the empty-kernel floor (CSVs packed in
# $OUT/results.tgz); --classic: the original's testAR..testA2AV binaries on the virtual node. --tune: purlin-tune, writing the table (and
# the benchmarks after it use it); --bench: the Atom benchmark and every collective's
# benchmark (8 ranks on the virtual node, a --check pass, AllReduce/AllGather plots) and the
# torch baseline (benches/torch_baseline.py, when python3 has torch). Every test runs on its own with its own time
# bound, so a hang costs one test, not the suite; PURLIN_GPU_DEADLINE (seconds, default 560)
# stops starting new work in time to pack the logs. Logs under $OUT (or ./logs); a summary last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
started=$(date +%s)
deadline=${PURLIN_GPU_DEADLINE:-560}
out=${OUT:-$here/logs}
logs=$(mktemp -d)
mkdir -p "$out"
tests=0 bench=0 tune=0 latency=0 classic=0
while [ $# -gt 0 ]; do
  case $1 in
    --tests) tests=1 ;;
    --bench) bench=1 ;;
    --tune) tune=1 ;;
    --latency) latency=1 ;;
    --classic) classic=1 ;;
    *) break ;;
  esac
  shift
done
[ $((tests + bench + tune + latency + classic)) -eq 0 ] && tests=1
filter=${1:-}
# Multicast / NVLS stays off (README, "Safety on shared GPU machines").
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The virtual node runs 8 ranks' kernels (plus side streams) at once: give every stream its own
# hardware queue so a waiting kernel never blocks another rank's work queued behind it.
export CUDA_DEVICE_MAX_CONNECTIONS=32
# The driver's PTX JIT takes tens of seconds for the collectives: keep its cache in the bundle
# (and hand it back in $OUT as jit-cache.tgz) so the next run on a fresh machine can start
# from it.
export CUDA_CACHE_PATH=$here/jit-cache CUDA_CACHE_MAXSIZE=4294967296
mkdir -p "$CUDA_CACHE_PATH"
# A cache handed back by an earlier run travels packed (put it in the bundle as jit-cache.tgz).
[ -f "$here/jit-cache.tgz" ] && tar xzf "$here/jit-cache.tgz" -C "$CUDA_CACHE_PATH"
# Cubins ptxas made from the embedded PTX when the bundle was built (scripts/gpu-bundle.sh).
[ -d "$here/cubin" ] && export PURLIN_CUBIN_DIR=$here/cubin
summary=$logs/summary.txt
: >"$summary"
status=0
say() { echo "$*" | tee -a "$summary"; }
left() { echo $((deadline - ($(date +%s) - started))); }
# Runs "$@" under a bound of min($1, time left) seconds (timeout's 124 when it ran past it);
# 125 without running it when the deadline leaves no time.
bounded() {
  local limit=$1; shift
  local l; l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  [ "$limit" -le 5 ] && return 125
  timeout "$limit" "$@"
}
say "commit $(cat "$here/COMMIT" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu /' | tee -a "$summary"

if [ $tests = 1 ]; then
  # The GPU suite is the test-gpu binary (CPU tests are CI's): one process per test.
  gpu_bin=$here/bin/test-gpu
  passed=0 failed=0 skipped=0 notrun=0
  for name in $("$gpu_bin" --list 2>/dev/null | sed -n 's/: test$//p'); do
    # The filter is an extended regular expression over the test names ('^(queued|safety)::').
    [ -n "$filter" ] && ! [[ $name =~ $filter ]] && continue
    log=$logs/test-${name//::/.}.log
    start=$(date +%s)
    bounded "${PURLIN_GPU_TEST_TIMEOUT:-420}" "$gpu_bin" --exact "$name" --test-threads=1 --nocapture >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 125 ]; then
      notrun=$((notrun + 1)); say "NOT RUN (deadline) $name"; continue
    fi
    if [ $rc -eq 0 ] && grep -q 'SKIPPED:' "$log"; then
      skipped=$((skipped + 1)); say "skipped ${secs}s $name: $(grep -o 'SKIPPED:.*' "$log" | head -1)"
    elif [ $rc -eq 0 ]; then
      passed=$((passed + 1)); say "ok ${secs}s $name"
    else
      failed=$((failed + 1)); status=1
      say "FAILED rc=$rc ${secs}s $name"
      grep -E 'panicked|assertion|Error|error' "$log" | head -4 | cut -c1-400 | sed 's/^/    /' | tee -a "$summary"
    fi
    grep -E 'cases run|checked|reported|replays' "$log" | sed 's/^/    /' | tee -a "$summary"
  done
  # PURLIN_GPU_EXAMPLES=0 leaves the examples out (a call that runs only some of the tests).
  for t in "$here"/bin/example-*; do
    [ "${PURLIN_GPU_EXAMPLES:-1}" = 0 ] && break
    [ -x "$t" ] || continue
    case $t in *-mpi) continue ;; esac
    name=$(basename "$t")
    bounded 120 "$t" >"$logs/$name.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then passed=$((passed + 1)); say "ok $name: $(tail -1 "$logs/$name.log" | cut -c1-200)"
    elif [ $rc -eq 125 ]; then notrun=$((notrun + 1)); say "NOT RUN (deadline) $name"
    else failed=$((failed + 1)); status=1; say "FAILED rc=$rc $name: $(tail -2 "$logs/$name.log" | cut -c1-300)"; fi
  done
  if [ "${PURLIN_GPU_EXAMPLES:-1}" != 0 ] && [ -x "$here/bin/example-p2p-mpi" ] && command -v mpirun >/dev/null; then
    if bounded 120 "$here/gpu-mpi.sh" run 64M >"$logs/example-p2p-mpi.log" 2>&1; then
      passed=$((passed + 1)); say "ok example-p2p-mpi (mpirun -n 2)"
    else failed=$((failed + 1)); status=1; say "FAILED example-p2p-mpi (mpirun -n 2)"; fi
  fi
  say "tests: $passed passed, $failed failed, $skipped skipped, $notrun not run"
fi

if [ $tune = 1 ]; then
  # World 8 first: the virtual node the benchmarks run. The table is rewritten after every
  # collective, so a run stopped by its bound keeps what it finished.
  bounded "${PURLIN_GPU_TUNE_TIMEOUT:-580}" "$here/bin/purlin-tune" --ranks 8,4,2 --bands 64K,1M,16M --runs 6 --out "$logs/sm90.table" >"$logs/tune.log" 2>&1 || status=1
  say "tune: $(grep -vc '^#' "$logs/sm90.table" 2>/dev/null) rows; $(tail -1 "$logs/tune.log")"
  # The benchmarks below measure what the tuned table chooses.
  [ -s "$logs/sm90.table" ] && export PURLIN_TUNING=$logs/sm90.table
fi
if [ $bench = 1 ]; then
  bounded 90 "$here/bin/purlin-atom-bench" >"$logs/atom_bench.md" 2>&1 || status=1
  tail -n 30 "$logs/atom_bench.md"
  for c in ar ag rs a2a agv rsv a2av; do
    plot=""
    case $c in ar|ag) plot="--plot $logs/${c}_busbw.png" ;; esac
    bounded 60 "$here/bin/purlin-bench" "$c" 8 256M 8 10 2 --ranks 8 $plot >"$logs/bench_$c.txt" 2>"$logs/bench_$c.err" || status=1
    grep -v '^#' "$logs/bench_$c.txt" | sed -n '1p;$p' | sed "s/^/$c /" | tee -a "$summary"
    # Correctness at every size of a shorter sweep.
    bounded 40 "$here/bin/purlin-bench" "$c" 1K 4M 0 1 0 --ranks 8 --check --csv >"$logs/check_$c.csv" 2>"$logs/check_$c.err" \
      || { say "purlin-bench $c --check FAILED: $(tail -1 "$logs/check_$c.err")"; status=1; }
    awk -F, '!/^#/ && $1 != "collective" && NF > 5 { n++; if ($10 != 0) bad++ } END { print "'"$c"' --check sizes: " n + 0 ", with wrong elements: " bad + 0 }' "$logs/check_$c.csv" | tee -a "$summary"
    if [ $c = ar ]; then
      bounded 60 "$here/bin/purlin-bench" ar 1M 256M 8 10 2 --ranks 8 --deterministic >"$logs/bench_ar_deterministic.txt" 2>&1 || status=1
    fi
  done
  # The same data movement by plain torch ops in this process, in this session: the baseline
  # beside every figure above (benches/torch_baseline.py).
  if [ -f "$here/torch_baseline.py" ] && python3 -c 'import torch' 2>/dev/null; then
    bounded 120 python3 "$here/torch_baseline.py" --ranks 8 --sizes 64M,256M --dtype bf16 \
      --csv "$logs/torch_baseline.csv" 2>"$logs/torch_baseline.err" || status=1
    say "torch baseline: $(tail -1 "$logs/torch_baseline.err")"
  fi
fi
if [ $latency = 1 ]; then
  mkdir -p "$logs/results"
  for c in ar ag rs a2a agv rsv a2av; do
    min=128; [ $c = ar ] && min=16
    for mode in one-graph per-rank; do
      flag=""; [ $mode = one-graph ] && flag=--one-graph
      worlds=8; [ $mode = one-graph ] && worlds="8 4 2 1"
      for w in $worlds; do
        f=$logs/results/$c-$mode-w$w.csv
        bounded 60 "$here/bin/purlin-bench" "$c" $min 1M 20 20 5 --ranks "$w" $flag --check --csv >"$f" 2>"$logs/latency_$c-$mode-w$w.err" \
          || { say "latency $c $mode w$w FAILED: $(tail -1 "$logs/latency_$c-$mode-w$w.err")"; status=1; }
        awk -F, -v t="$c $mode w$w" '$1 != "collective" && NF > 5 { n++; if ($10 != 0) bad++; if ($3 <= 32768 && $7 > worst) worst = $7; if ($3 == 32768 || $3 == 16 || $3 == 1048576) at = at " " $3 ":" $7; fl = $12 }
          END { printf "%s: %d sizes, %d with wrong elements; worst <=32K %.1f us;%s; floor %s us\n", t, n, bad, worst, at, fl }' "$f" | tee -a "$summary"
      done
    done
  done
fi
if [ $classic = 1 ]; then
  mkdir -p "$logs/results"
  for t in AR AG RS A2A AGV RSV A2AV; do
    max=64M; [ $t = AR ] && max=${PURLIN_TESTAR_MAX:-1G}
    bounded 240 "$here/bin/test$t" 1K $max >"$logs/results/test$t.csv" 2>"$logs/test$t.err"
    rc=$?; [ $rc -ne 0 ] && status=1
    say "test$t 1K $max: rc=$rc, $(grep -vc '^collective' "$logs/results/test$t.csv") sizes, max error(%) $(awk -F, 'NR > 1 && $7 > m { m = $7 } END { print m + 0 }' "$logs/results/test$t.csv"), $(tail -1 "$logs/results/test$t.csv" | cut -d, -f3,5,6)"
  done
  bounded 60 "$here/bin/testAR" 1K 16M 10 10 5 42 --reduction-mode deterministic >"$logs/results/testAR-deterministic.csv" 2>"$logs/testAR-det.err" || status=1
  say "testAR deterministic: $(tail -1 "$logs/results/testAR-deterministic.csv")"
  BENCH_ZIPF_EXPONENT=2 bounded 60 "$here/bin/testA2AV" 1K 16M >"$logs/results/testA2AV-zipf2.csv" 2>"$logs/testA2AV-zipf2.err" || status=1
  say "testA2AV zipf 2: $(tail -1 "$logs/results/testA2AV-zipf2.csv")"
fi
say "wall $(( $(date +%s) - started ))s"
[ -d "$logs/results" ] && tar czf "$out/results.tgz" -C "$logs" results
tar czf "$out/logs.tgz" -C "$logs" .
tar czf "$out/jit-cache.tgz" -C "$CUDA_CACHE_PATH" . 2>/dev/null
for keep in summary.txt atom_bench.md ar_busbw.png ag_busbw.png sm90.table; do
  [ -f "$logs/$keep" ] && cp "$logs/$keep" "$out/"
done
echo "---- summary (full logs: logs.tgz)"; cat "$summary"
exit $status
