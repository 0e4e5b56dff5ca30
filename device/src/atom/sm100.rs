//! Blackwell: Hopper's datapath for now (validated by `ptxas` only: no sm_100 GPU is lent).

use super::sm80::ring_reduce;
use super::sm90::{Sm90, hopper_copy};

/// sm_100: the Sm90 datapath (bulk engine + `cp.async` ring).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sm100;

atom! {
    Sm100 {
        name: "sm100",
        threads: Sm90::THREADS,
        smem: Sm90::SMEM_BYTES,
        copy_to_all(coop, dsts, src, bytes, smem) => hopper_copy(coop, dsts, src, bytes, smem),
        reduce_to_all<T, O>(coop, dsts, srcs, count, smem) => {
            ring_reduce::<T, O>(coop, dsts, srcs, count, smem)
        },
        // Thread 0 issues the bulk copies (the async proxy): order its acquire before them,
        // and the peers' reads it waited for before its bulk writes into a reused slot.
        after_wait() => crate::arch::fence_proxy_async(),
        // A launch may start while the one before it on its stream runs (programmatic
        // dependent launch, sm_90): wait for it in the kernel instead.
        await_prior_grids() => crate::arch::await_prior_grids(),
        launch_dependents() => crate::arch::launch_dependents(),
    }
}
