#!/usr/bin/env bash
# Installs (once) and prints the path of a tool the test command needs.
#   tools.sh ptxas      ptxas from the PyPI wheel nvidia-cuda-nvcc==13.0.88, under .tools/
#   tools.sh toolchain  the pinned nightly with rust-src, llvm-tools, llvm-bitcode-linker
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  ptxas)
    ptxas=$root/.tools/nvcc/nvidia/cu13/bin/ptxas
    if [ ! -x "$ptxas" ]; then
      python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$root/.tools/nvcc" \
        nvidia-cuda-nvcc==13.0.88 >&2
    fi
    echo "$ptxas" ;;
  toolchain)
    channel=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$root/rust-toolchain.toml")
    if ! rustup run "$channel" rustc --version >/dev/null 2>&1 \
       || ! rustup component list --toolchain "$channel" --installed 2>/dev/null | grep -q llvm-bitcode-linker; then
      rustup toolchain install "$channel" --profile minimal \
        --component rust-src,llvm-tools,llvm-bitcode-linker,rustfmt,clippy >&2
    fi
    echo "$channel" ;;
  *) echo "usage: tools.sh ptxas|toolchain" >&2; exit 2 ;;
esac
