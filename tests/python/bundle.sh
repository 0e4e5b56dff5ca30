#!/usr/bin/env bash
# Packs what the Python GPU suite needs into one folder (default target/python-gpu, git-ignored;
# small enough to carry): the release wheel (built and CPU-tested by scripts/test-python.sh),
# sm_90 cubins of the embedded PTX (ptxas here, so the GPU machine's driver need not JIT them:
# PURLIN_CUBIN_DIR), the GPU tests, the quickstart, and tests/python/gpu-run.sh as run.sh.
#     tests/python/bundle.sh [DIR]     # here
#     DIR/run.sh                       # there (python3 with torch and pytest; no Rust)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
dir=${1:-$root/target/python-gpu}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -rf "$dir/wheels" "$dir/tests" "$dir/examples" "$dir/cubin"
mkdir -p "$dir/wheels" "$dir/tests" "$dir/examples/python" "$dir/cubin"
PURLIN_WHEEL_DIR=$dir/wheels "$root/scripts/test-python.sh" -q
cp tests/python/test_gpu.py tests/python/rank.sh "$dir/tests/"
cp examples/python/quickstart.py "$dir/examples/python/"
cp tests/python/gpu-run.sh "$dir/run.sh"
# The PTX the wheel embeds, as the host crate's build script left it in <target>/ptx.
target=$(cargo metadata --no-deps --format-version 1 \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
"$root/scripts/cubins.sh" "$target/ptx" "$dir/cubin"
git rev-parse --short HEAD >"$dir/COMMIT" 2>/dev/null || echo unknown >"$dir/COMMIT"
git diff --quiet 2>/dev/null || echo "(with uncommitted changes)" >>"$dir/COMMIT"
du -sh "$dir" | awk '{print "python GPU bundle: " $1}'
