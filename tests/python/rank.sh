#!/usr/bin/env bash
# One torchrun rank of the GPU pytest suite (gpu-run.sh starts it with torchrun --no-python):
# pytest's output goes to $PURLIN_PY_LOGS/pytest-w<world>-rank<rank>.log.
here=$(cd "$(dirname "$0")" && pwd)
logs=${PURLIN_PY_LOGS:-.}
name=pytest-w${WORLD_SIZE}-rank${RANK}
exec python3 -m pytest -q -rs -p no:cacheprovider "$here/test_gpu.py" \
  --junitxml="$logs/$name.xml" >"$logs/$name.log" 2>&1
