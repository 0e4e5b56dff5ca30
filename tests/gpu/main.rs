//! The GPU suite, one binary: every test opens GPU 0 and skips (printing `SKIPPED: <reason>`)
//! when there is none. Run here with `cargo test -p purlin-tests --test gpu`, or on a GPU
//! machine without Rust from the bundle `scripts/gpu-bundle.sh` builds.

/// GPU 0 with its newest PTX, or a return from the calling test once `gpu_or_skip` said why.
macro_rules! gpu_or_return {
    ($test:expr) => {
        match purlin_tests::gpu_or_skip($test, None) {
            Some(gpu) => gpu,
            None => return,
        }
    };
}

mod atoms;
mod collectives;
mod host;
mod queued;
mod safety;
mod support;
mod symmetric;
