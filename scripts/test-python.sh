#!/usr/bin/env bash
# The Python package's CPU part, from a fresh machine: a venv under .tools/python-venv with
# maturin and pytest (not torch: the CPU tests do not need it), the release wheel built by
# maturin into target/wheels/ (PURLIN_WHEEL_DIR overrides; tests/python/bundle.sh ships it to
# the GPU machine), installed into the venv, then pytest on tests/python (the GPU tests skip
# without torch, CUDA and torchrun).
#     scripts/test-python.sh [pytest args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/tools.sh" toolchain >/dev/null
venv=$root/.tools/python-venv
python=$venv/bin/python
if [ ! -x "$python" ]; then
  python3 -m venv "$venv"
fi
"$python" -m pip install --quiet --disable-pip-version-check "maturin>=1.9,<2" "pytest>=7"
wheels=${PURLIN_WHEEL_DIR:-$root/target/wheels}
mkdir -p "$wheels"
rm -f "$wheels"/purlin-*.whl
# --compatibility linux: the wheel is for this project's machines (built here, glibc 2.36, run
# on the GPU machine's newer glibc), not for PyPI.
"$venv/bin/maturin" build --release --compatibility linux \
  --manifest-path "$root/host/python/Cargo.toml" --out "$wheels" \
  --interpreter "$python"
wheel=$(ls "$wheels"/purlin-*.whl)
"$python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
echo "wheel: $wheel"
# Run from outside the source tree, so `import purlin` is the installed wheel.
cd "$root/tests/python"
"$python" -m pytest -q -p no:cacheprovider "$@" .
