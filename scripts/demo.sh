#!/usr/bin/env bash
# The main demo: a host-launched AllReduce over 8 ranks, on the GPU if there is one (the virtual
# node: all ranks on GPU 0), else on the CPU emulation; it says which. Installs the toolchain.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/tools.sh" toolchain >/dev/null
cargo run --release -q -p purlin-examples --example all_reduce -- "$@"
