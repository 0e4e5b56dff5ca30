#!/usr/bin/env bash
# Installs (once) and prints the path of a tool the test command needs.
#   tools.sh ptxas      ptxas from the PyPI wheel nvidia-cuda-nvcc==13.0.88, under .tools/
#   tools.sh toolchain  the pinned nightly with rust-src, llvm-tools, llvm-bitcode-linker
#   tools.sh mpi        the apt packages the `mpi` feature builds with (Open MPI headers and
#                       mpirun, libclang for bindgen); prints the mpicc path
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
  mpi)
    pkgs="libopenmpi-dev libclang-dev openmpi-bin"
    missing=""
    for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
    if [ -n "$missing" ]; then
      sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
      $sudo apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >&2
    fi
    command -v mpicc ;;
  *) echo "usage: tools.sh ptxas|toolchain|mpi" >&2; exit 2 ;;
esac
