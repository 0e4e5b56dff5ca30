#!/usr/bin/env bash
# The `mpi` feature (one process per GPU under mpirun): installs Open MPI and libclang from apt
# if missing (scripts/tools.sh mpi), then builds, lints and documents purlin with the feature,
# builds the p2p example with it, and runs it under `mpirun -n 2` (on a machine without a GPU
# it says so and exits 0; with one, both ranks share GPU 0 through CUDA IPC).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/tools.sh" mpi >/dev/null
cargo build -p purlin --features mpi
cargo clippy -p purlin -p purlin-examples -p purlin-bench --no-deps --all-targets --features purlin/mpi,purlin-bench/mpi -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc -p purlin --no-deps --features mpi
cargo build -p purlin-examples --example p2p --features mpi
# The bootstrap's bounded exchanges, two processes (no GPU needed).
exchanges=$(cargo test -p purlin --features mpi --test mpi_bootstrap --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "mpi_bootstrap":
        print(m["executable"])')
timeout 120 mpirun --allow-run-as-root --oversubscribe -n 2 "$exchanges" --nocapture
timeout 300 mpirun --allow-run-as-root --oversubscribe -n 2 target/debug/examples/p2p 1M
