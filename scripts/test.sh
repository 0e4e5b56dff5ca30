#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs the pinned toolchain and ptxas (the PyPI
# wheel), then formatting, lints, every test (CPU emulation always; GPU tests run when a GPU is
# present and print SKIPPED otherwise), doc tests, the Python wheel and its CPU tests, ptxas validation of every PTX file (register
# and spill report under target/ptxas/), and rustdoc with warnings denied.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
step() { printf '\n==== %s\n' "$*"; }

step "toolchain and tools"
"$root/scripts/tools.sh" toolchain
"$root/scripts/tools.sh" ptxas

step "format"
cargo fmt --all --check

step "lints"
cargo clippy --workspace --all-targets -- -D warnings

step "tests (CPU emulation; GPU tests skip without a GPU)"
cargo test --workspace --no-fail-fast

step "python: the wheel (maturin), import and the CPU pytest part"
"$root/scripts/test-python.sh"

step "ptxas: every PTX file, no spills in Atom kernels"
"$root/scripts/ptxas-check.sh"

step "rustdoc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

if [ -x "$root/scripts/test-mpi.sh" ]; then
  step "mpi feature"
  "$root/scripts/test-mpi.sh"
fi

step "all passed"
