//! Volta and later: the register datapath, tuned for many loads in flight.

use super::register;

/// sm_70: 16-byte register copy and reduce, 8 copy vectors or 4 reduce vectors in flight per
/// thread. Needs no shared memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sm70;

atom! {
    Sm70 {
        name: "sm70",
        threads: 512,
        smem: 0,
        copy_to_all(coop, dsts, src, bytes, _smem) => register::copy_to_all(coop, dsts, src, bytes),
        reduce_to_all<T, O>(coop, dsts, srcs, count, _smem) => {
            register::reduce_to_all::<T, O>(coop, dsts, srcs, count)
        },
    }
}
