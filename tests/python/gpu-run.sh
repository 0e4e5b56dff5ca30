#!/usr/bin/env bash
# The Python GPU suite, on a machine with the NVIDIA driver, python3 with torch and pytest, and
# no Rust or network. Run it from the folder tests/python/bundle.sh made (its wheels/, cubin/,
# tests/, examples/ and this script as run.sh):
#     ./run.sh [quickstart] [2] [4]        (no argument: all three)
# 1. unpacks the bundled wheel (or the one in $PURLIN_WHEELS) into a private folder on
#    PYTHONPATH (nothing system-wide),
# 2. runs examples/python/quickstart.py under torchrun with 4 processes (all on GPU 0 unless
#    CUDA_VISIBLE_DEVICES says otherwise),
# 3. runs tests/test_gpu.py under torchrun with 2 and with 4 processes (every rank runs pytest;
#    one log per rank).
# Every step runs under a time bound, and PURLIN_GPU_DEADLINE (seconds, default 560) stops
# starting steps in time for the logs to come back. Logs and a summary under $OUT (or ./logs);
# exits non-zero if anything failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
started=$(date +%s)
deadline=${PURLIN_GPU_DEADLINE:-560}
steps=${*:-quickstart 2 4}
# Runs "$@" under min($1, time left) seconds; 125 without running when no time is left.
bounded() {
  local limit=$1; shift
  local left=$((deadline - ($(date +%s) - started)))
  [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -le 5 ] && return 125
  timeout "$limit" "$@"
}
out=${OUT:-$here/logs}
mkdir -p "$out"
summary=$out/python-summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0
# Multicast / NVLS stays off (README, "Safety on shared GPU machines").
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=32
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-0}
export CUDA_CACHE_PATH=$here/jit-cache CUDA_CACHE_MAXSIZE=4294967296
mkdir -p "$CUDA_CACHE_PATH"
[ -d "$here/cubin" ] && export PURLIN_CUBIN_DIR=$here/cubin
say "commit $(cat "$here/COMMIT" 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu /' | tee -a "$summary"
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tee -a "$summary"

# A wheel is a zip of the installed files: unpacked onto PYTHONPATH it needs no pip.
site=$(mktemp -d)
wheels=${PURLIN_WHEELS:-$here/wheels}
if ! python3 -m zipfile -e "$(ls "$wheels"/purlin-*.whl | head -1)" "$site" >"$out/unpack.log" 2>&1; then
  say "FAILED: unpacking the wheel (see unpack.log)"; cat "$out/unpack.log"; exit 1
fi
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import purlin; print("purlin", purlin.__version__, "from", purlin.__file__)' | tee -a "$summary"

# 2. The quickstart, 4 processes.
if [[ " $steps " == *" quickstart "* ]]; then
  if bounded 200 torchrun --standalone --nproc-per-node 4 "$here/examples/python/quickstart.py" \
       >"$out/quickstart-4.log" 2>&1; then
    say "quickstart (4 processes): passed"
  else
    say "quickstart (4 processes): FAILED (exit $?)"; status=1
  fi
  grep -E '^(check|bandwidth|host cost)' "$out/quickstart-4.log" | tee -a "$summary"
fi

# 3. The pytest GPU suite, 2 and 4 processes.
export PURLIN_PY_LOGS=$out PURLIN_PY_RESULTS=$out/host-cost.txt
: >"$PURLIN_PY_RESULTS"
for n in 2 4; do
  [[ " $steps " == *" $n "* ]] || continue
  bounded 300 torchrun --standalone --nproc-per-node "$n" --no-python \
    bash "$here/tests/rank.sh" >"$out/torchrun-w$n.log" 2>&1
  rc=$?
  for r in $(seq 0 $((n - 1))); do
    log=$out/pytest-w$n-rank$r.log
    # pytest's closing line ("N passed, M skipped in T s"); a run that passed nothing failed.
    line=$(grep -E '[0-9]+ (passed|failed|errors?|skipped).* in [0-9.]+s' "$log" 2>/dev/null | tail -1)
    say "pytest world $n rank $r: ${line:-no result (see $(basename "$log"))}"
    echo "$line" | grep -qE '[0-9]+ (failed|errors?)' && status=1
    echo "$line" | grep -qE '[0-9]+ passed' || status=1
  done
  [ $rc -eq 0 ] || { say "torchrun world $n exited $rc"; status=1; }
done
cat "$PURLIN_PY_RESULTS" | tee -a "$summary"
if [ $status -eq 0 ]; then say "python GPU suite: all passed"; else say "python GPU suite: FAILED"; fi
exit $status
