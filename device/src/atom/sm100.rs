//! Blackwell: Hopper's datapath for now (validated by `ptxas` only: no sm_100 GPU is lent).

use super::sm90::{Sm90, hopper_copy};
use super::{Atom, sm80::ring_reduce};
use crate::coop::Coop;
use crate::element::Element;
use crate::op::ReduceOp;

/// sm_100: the Sm90 datapath (bulk engine + `cp.async` ring).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sm100;

impl Atom for Sm100 {
    const NAME: &'static str = "sm100";
    const THREADS: u32 = Sm90::THREADS;
    const SMEM_BYTES: u32 = Sm90::SMEM_BYTES;

    #[inline(always)]
    unsafe fn copy(coop: Coop, dst: *mut u8, src: *const u8, bytes: usize, smem: *mut u8) {
        // SAFETY: forwarded contract.
        unsafe { hopper_copy(coop, dst, src, bytes, smem) }
    }

    #[inline(always)]
    unsafe fn reduce<T: Element, O: ReduceOp>(
        coop: Coop,
        dst: *mut T,
        srcs: &[*const T],
        count: usize,
        smem: *mut u8,
    ) {
        // SAFETY: forwarded contract.
        unsafe { ring_reduce::<T, O>(coop, dst, srcs, count, smem) }
    }
}
