#!/usr/bin/env bash
# The Python GPU suite, on a machine with the NVIDIA driver, python3 with torch and pytest, and
# no Rust or network. Run it from the folder tests/python/bundle.sh made (its wheels/, cubin/,
# tests/, examples/ and this script as run.sh):
#     ./run.sh
# 1. installs the bundled wheel into a private folder (PYTHONPATH; nothing system-wide),
# 2. runs examples/python/quickstart.py under torchrun with 4 processes (all on GPU 0 unless
#    CUDA_VISIBLE_DEVICES says otherwise),
# 3. runs tests/test_gpu.py under torchrun with 2 and with 4 processes (every rank runs pytest;
#    one log per rank).
# Logs and a summary under $OUT (or ./logs); exits non-zero if anything failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/logs}
mkdir -p "$out"
summary=$out/python-summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
status=0
# Multicast / NVLS stays off (DESIGN.md, Safety).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=32
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-0}
export CUDA_CACHE_PATH=$here/jit-cache CUDA_CACHE_MAXSIZE=4294967296
mkdir -p "$CUDA_CACHE_PATH"
[ -d "$here/cubin" ] && export PURLIN_CUBIN_DIR=$here/cubin
say "commit $(cat "$here/COMMIT" 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu /' | tee -a "$summary"
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tee -a "$summary"

site=$(mktemp -d)
if ! python3 -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
     --target "$site" "$here"/wheels/purlin-*.whl >"$out/pip.log" 2>&1; then
  say "FAILED: installing the wheel (see pip.log)"; cat "$out/pip.log"; exit 1
fi
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
python3 -c 'import purlin; print("purlin", purlin.__version__, "from", purlin.__file__)' | tee -a "$summary"

# 2. The quickstart, 4 processes.
if timeout 600 torchrun --standalone --nproc-per-node 4 "$here/examples/python/quickstart.py" \
     >"$out/quickstart-4.log" 2>&1; then
  say "quickstart (4 processes): passed"
else
  say "quickstart (4 processes): FAILED (exit $?)"; status=1
fi
grep -E '^(check|bandwidth|host cost)' "$out/quickstart-4.log" | tee -a "$summary"

# 3. The pytest GPU suite, 2 and 4 processes.
export PURLIN_PY_LOGS=$out PURLIN_PY_RESULTS=$out/host-cost.txt
: >"$PURLIN_PY_RESULTS"
for n in 2 4; do
  timeout 900 torchrun --standalone --nproc-per-node "$n" --no-python \
    bash "$here/tests/rank.sh" >"$out/torchrun-w$n.log" 2>&1
  rc=$?
  for r in $(seq 0 $((n - 1))); do
    log=$out/pytest-w$n-rank$r.log
    line=$(grep -E '(passed|failed|error)' "$log" 2>/dev/null | tail -1)
    say "pytest world $n rank $r: ${line:-no result (see $(basename "$log"))}"
    grep -qE '(^|, )[0-9]+ (failed|error)' "$log" 2>/dev/null && status=1
    [ -n "$line" ] || status=1
  done
  [ $rc -eq 0 ] || { say "torchrun world $n exited $rc"; status=1; }
done
cat "$PURLIN_PY_RESULTS" | tee -a "$summary"
if [ $status -eq 0 ]; then say "python GPU suite: all passed"; else say "python GPU suite: FAILED"; fi
exit $status
