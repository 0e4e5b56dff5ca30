//! The GPU suite, one binary: every test opens GPU 0 and skips (printing `SKIPPED: <reason>`)
//! when there is none. Run here with `cargo test -p purlin-tests --test gpu`, or on a GPU
//! machine without Rust from the bundle `scripts/gpu-bundle.sh` builds.

mod atoms;
mod collectives;
mod host;
mod queued;
mod safety;
