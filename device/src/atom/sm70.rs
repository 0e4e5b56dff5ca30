//! Volta and later: the register datapath, tuned for many loads in flight.

use super::{Atom, register};
use crate::coop::Coop;
use crate::element::Element;
use crate::op::ReduceOp;

/// sm_70: 16-byte register copy and reduce, 8 copy vectors or 4 reduce vectors in flight per
/// thread. Needs no shared memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sm70;

impl Atom for Sm70 {
    const NAME: &'static str = "sm70";
    const THREADS: u32 = 512;
    const SMEM_BYTES: u32 = 0;

    #[inline(always)]
    unsafe fn copy(coop: Coop, dst: *mut u8, src: *const u8, bytes: usize, _smem: *mut u8) {
        // SAFETY: forwarded contract.
        unsafe { register::copy(coop, dst, src, bytes) }
    }

    #[inline(always)]
    unsafe fn reduce<T: Element, O: ReduceOp>(
        coop: Coop,
        dst: *mut T,
        srcs: &[*const T],
        count: usize,
        _smem: *mut u8,
    ) {
        // SAFETY: forwarded contract.
        unsafe { register::reduce::<T, O>(coop, dst, srcs, count) }
    }
}
