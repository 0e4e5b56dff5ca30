#!/usr/bin/env bash
# Builds here everything a GPU run needs into ./gpu-bundle (git-ignored): the test binaries
# (cargo test --no-run), the benchmark and example binaries, each stripped (the PTX is embedded
# in them), and run.sh, which runs the whole GPU suite on a machine with the NVIDIA driver and
# no Rust:
#     scripts/gpu-bundle.sh                 # here
#     cd gpu-bundle && ./run.sh [filter]    # there; logs go to $OUT (or ./logs)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/tools.sh" toolchain >/dev/null
bundle=$root/gpu-bundle
# Keep the driver's JIT cache a previous run handed back (jit-cache.tgz, see run.sh); everything
# else is rebuilt.
if [ -f "$bundle/jit-cache.tgz" ]; then mv "$bundle/jit-cache.tgz" "$root/target/jit-cache.tgz.keep"; fi
rm -rf "$bundle" && mkdir -p "$bundle/bin"
if [ -f "$root/target/jit-cache.tgz.keep" ]; then mv "$root/target/jit-cache.tgz.keep" "$bundle/jit-cache.tgz"; fi

# The GPU test binary (the CPU suites are CI's; every GPU test skips without a GPU).
cargo test -p purlin-tests --test gpu --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do cp "$exe" "$bundle/bin/test-$name"; done

# Benchmarks and examples, release.
cargo build --release -p purlin-bench --bins --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])
' | while read -r exe; do cp "$exe" "$bundle/bin/"; done
if cargo metadata --no-deps --format-version 1 | grep -q '"name":"purlin-examples"'; then
  cargo build --release -p purlin-examples --examples --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "example" in m["target"]["kind"]:
        print(m["target"]["name"], m["executable"])
' | while read -r name exe; do cp "$exe" "$bundle/bin/example-$name"; done
fi
strip "$bundle"/bin/* 2>/dev/null || true
# Precompiled sm_90 cubins of the embedded PTX (ptxas here), so the GPU machine's driver need not
# JIT-compile them (PURLIN_CUBIN_DIR, see purlin::ptx::precompiled; run.sh sets it). Each cubin
# carries the fingerprint of the PTX it was made from; a stale one is ignored. CUBIN_ARCHS=90
# (see cubins.sh) makes a bundle in about 5 min instead of 20 whose Atom tests JIT-compile.
"$root/scripts/cubins.sh" "$root/target/ptx" "$bundle/cubin"
cp "$root/scripts/gpu-run.sh" "$bundle/run.sh"
cp "$root/benches/torch_baseline.py" "$root/scripts/probe-blocking.py" "$bundle/"
git rev-parse --short HEAD >"$bundle/COMMIT" 2>/dev/null || echo unknown >"$bundle/COMMIT"
git diff --quiet 2>/dev/null || echo "(with uncommitted changes)" >>"$bundle/COMMIT"
du -sh "$bundle" | awk '{print "gpu-bundle: " $1}'
ls "$bundle/bin"
