#!/usr/bin/env bash
# The p2p example under MPI on a GPU machine (correctness only: two processes on one GPU
# time-slice). Two halves:
#     scripts/gpu-mpi.sh build          # here: adds bin/example-p2p-mpi to ./gpu-bundle
#     ./gpu-mpi.sh run [bytes]          # there, in the bundle: mpirun -n 2, both on GPU 0
#                                       # (or one GPU each when there are two)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case "${1:-}" in
  build)
    root=$(cd "$here/.." && pwd)
    cd "$root"
    "$root/scripts/tools.sh" mpi >/dev/null
    mkdir -p gpu-bundle/bin
    cargo build --release -p purlin-examples --example p2p --features mpi
    cp target/release/examples/p2p gpu-bundle/bin/example-p2p-mpi
    strip gpu-bundle/bin/example-p2p-mpi 2>/dev/null || true
    cp "$here/gpu-mpi.sh" gpu-bundle/gpu-mpi.sh ;;
  run)
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    exe=$here/bin/example-p2p-mpi
    [ -x "$exe" ] || exe=$here/gpu-bundle/bin/example-p2p-mpi
    timeout 600 mpirun --allow-run-as-root --oversubscribe -n 2 "$exe" "${2:-256M}" ;;
  *) echo "usage: gpu-mpi.sh build|run [bytes]" >&2; exit 2 ;;
esac
