//! Ampere and later: `cp.async` 16-byte loads into a shared-memory ring, drained with
//! `ld.shared` + `st.global`. Each thread owns its ring slots, so no barrier is needed, and
//! `STAGES - 1` groups of loads stay in flight per thread: many outstanding remote reads is
//! what saturates NVLink.

// seq! unrolls `K * stride` with K = 0, 1, ...: the `0 * stride` and `1 * stride` it writes are
// the point, not a mistake.
#![allow(clippy::erasing_op, clippy::identity_op)]

use super::register::combine_into;
use super::{copy_bytes, reduce_scalar};
use crate::arch;
use crate::coop::Coop;
use crate::element::Element;
use crate::op::ReduceOp;
use seq_macro::seq;

/// Ring depth (groups in flight per thread).
pub(crate) const STAGES: usize = 8;
/// 16-byte vectors per thread per stage.
pub(crate) const VECTORS_PER_STAGE: usize = 2;
const _: () = assert!(
    VECTORS_PER_STAGE == 2,
    "ring_reduce names one accumulator per vector"
);

/// Shared memory the ring needs for `threads` threads of a block.
pub(crate) const fn ring_bytes(threads: u32) -> u32 {
    (STAGES * VECTORS_PER_STAGE * 16) as u32 * threads
}

/// This thread's ring: its slots and the vectors it handles.
#[derive(Clone, Copy)]
struct Ring {
    smem: *mut u8,
    coop: Coop,
    vectors: usize,
    /// This thread's place among its block's part of the group, and that part's size: slot
    /// coordinates, worked out once rather than with a division per access.
    lane: usize,
    lanes: usize,
}

impl Ring {
    #[inline(always)]
    fn new(smem: *mut u8, coop: Coop, vectors: usize) -> Self {
        Self {
            smem,
            coop,
            vectors,
            lane: coop.thread() as usize,
            lanes: coop.threads_per_block() as usize,
        }
    }
}

impl Ring {
    /// Slot `k` of `stage` for this thread; consecutive threads get consecutive 16-byte slots,
    /// so a warp's shared-memory accesses are free of bank conflicts. Slots follow the thread's
    /// place in its block's part of the group: a group spanning blocks (`Coop::grid`) has more
    /// threads than one block's ring has slots. (Groups smaller than a block that run at the
    /// same time pass distinct `smem`.)
    #[inline(always)]
    fn slot(&self, stage: usize, k: usize) -> *mut u8 {
        let index = (stage * VECTORS_PER_STAGE + k) * self.lanes + self.lane;
        self.smem.wrapping_add(index * 16)
    }

    /// The vector handled by slot `k` of group `group`, if it exists.
    #[inline(always)]
    fn vector(&self, group: usize, k: usize) -> Option<usize> {
        let size = self.coop.size as usize;
        let v = group * VECTORS_PER_STAGE * size + k * size + self.coop.index as usize;
        (v < self.vectors).then_some(v)
    }

    #[inline(always)]
    fn groups(&self) -> usize {
        self.vectors
            .div_ceil(VECTORS_PER_STAGE * self.coop.size as usize)
    }

    /// Starts loading group `group` of `src` into the ring.
    ///
    /// # Safety
    /// `src` is valid for `self.vectors` vectors; the ring lies in shared memory.
    #[inline(always)]
    unsafe fn load(&self, src: *const u8, group: usize) {
        let stage = group % STAGES;
        for k in 0..VECTORS_PER_STAGE {
            if let Some(v) = self.vector(group, k) {
                // SAFETY: `v < vectors`; the slot is this thread's.
                unsafe { arch::cp_async_16(self.slot(stage, k), src.add(v * 16)) };
            }
        }
    }
}

/// Copies through the ring into every destination (each vector loaded once).
///
/// # Safety
/// As [`Atom::copy_to_all`], with `smem` holding `ring_bytes` of the block's threads.
#[inline(always)]
pub(crate) unsafe fn ring_copy(
    coop: Coop,
    dsts: &[*mut u8],
    src: *const u8,
    bytes: usize,
    smem: *mut u8,
) {
    let ring = Ring::new(smem, coop, bytes / 16);
    let groups = ring.groups();
    for g in 0..STAGES {
        if g < groups {
            // SAFETY: forwarded contract.
            unsafe { ring.load(src, g) };
        }
        arch::cp_async_commit();
    }
    for g in 0..groups {
        // Groups g+1 .. g+STAGES-1 may still be in flight; group g has landed.
        arch::cp_async_wait::<{ STAGES as u32 - 1 }>();
        let stage = g % STAGES;
        for k in 0..VECTORS_PER_STAGE {
            if let Some(v) = ring.vector(g, k) {
                // SAFETY: the slot is this thread's and its copy completed.
                let r = unsafe { arch::ld_shared_v128(ring.slot(stage, k) as *const u128) };
                for dst in dsts {
                    // SAFETY: `v < vectors`.
                    unsafe { arch::st_v128((*dst as *mut u128).add(v), r) };
                }
            }
        }
        if g + STAGES < groups {
            // SAFETY: the stage was drained just above (the stores consumed its registers).
            unsafe { ring.load(src, g + STAGES) };
        }
        arch::cp_async_commit();
    }
    arch::cp_async_wait::<0>();
    // SAFETY: the tail lies within `bytes`.
    unsafe { copy_bytes(coop, dsts, src, ring.vectors * 16, bytes) };
}

/// Reduces through the ring into every destination: stage `q` holds group `q / n` of source
/// `q % n`, so the ring stays full whatever the number of sources.
///
/// # Safety
/// As [`Atom::reduce_to_all`], with `smem` holding `ring_bytes` of the block's threads.
#[inline(always)]
pub(crate) unsafe fn ring_reduce<T: Element, O: ReduceOp>(
    coop: Coop,
    dsts: &[*mut T],
    srcs: &[*const T],
    count: usize,
    smem: *mut u8,
) {
    let ring = Ring::new(smem, coop, count / T::LANES);
    let n = srcs.len();
    let items = ring.groups() * n;
    // (group, source) of the next item to load.
    let (mut load_group, mut load_source) = (0usize, 0usize);
    for q in 0..STAGES {
        if q < items {
            // SAFETY: forwarded contract; the ring index of item q is q % STAGES.
            unsafe { ring.load_item(srcs[load_source] as *const u8, load_group, q) };
            advance(&mut load_group, &mut load_source, n);
        }
        arch::cp_async_commit();
    }
    let (mut acc0, mut acc1) = (T::Lanes::default(), T::Lanes::default());
    let (mut group, mut source) = (0usize, 0usize);
    for q in 0..items {
        arch::cp_async_wait::<{ STAGES as u32 - 1 }>();
        let stage = q % STAGES;
        // Two named accumulators rather than an array indexed in a loop, so they stay in
        // registers (one per vector of a stage: VECTORS_PER_STAGE = 2).
        seq!(K in 0..2 {
            if ring.vector(group, K).is_some() {
                // SAFETY: this thread's slot; its copy completed.
                let raw = unsafe { arch::ld_shared_v128(ring.slot(stage, K) as *const u128) };
                if source == 0 {
                    acc~K = T::unpack(raw);
                } else {
                    combine_into::<T, O>(&mut acc~K, raw);
                }
            }
        });
        if source + 1 == n {
            seq!(K in 0..2 {
                if let Some(v) = ring.vector(group, K) {
                    let packed = T::pack(acc~K);
                    for dst in dsts {
                        // SAFETY: `v < vectors`.
                        unsafe { arch::st_v128((*dst as *mut u128).add(v), packed) };
                    }
                }
            });
        }
        if q + STAGES < items {
            // SAFETY: the stage was drained just above.
            unsafe { ring.load_item(srcs[load_source] as *const u8, load_group, q + STAGES) };
            advance(&mut load_group, &mut load_source, n);
        }
        arch::cp_async_commit();
        advance(&mut group, &mut source, n);
    }
    arch::cp_async_wait::<0>();
    // SAFETY: the tail lies within `count`.
    unsafe { reduce_scalar::<T, O>(coop, dsts, srcs, ring.vectors * T::LANES, count) };
}

impl Ring {
    /// Starts loading group `group` of `src` into the stage of ring item `item`.
    ///
    /// # Safety
    /// As [`Ring::load`].
    #[inline(always)]
    unsafe fn load_item(&self, src: *const u8, group: usize, item: usize) {
        let stage = item % STAGES;
        for k in 0..VECTORS_PER_STAGE {
            if let Some(v) = self.vector(group, k) {
                // SAFETY: `v < vectors`; the slot is this thread's.
                unsafe { arch::cp_async_16(self.slot(stage, k), src.add(v * 16)) };
            }
        }
    }
}

/// Next (group, source) in source-major order within a group.
#[inline(always)]
fn advance(group: &mut usize, source: &mut usize, n: usize) {
    *source += 1;
    if *source == n {
        *source = 0;
        *group += 1;
    }
}

/// sm_80: the `cp.async` shared-memory ring, 8 stages × 2 vectors per thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sm80;

atom! {
    Sm80 {
        name: "sm80",
        threads: 256,
        smem: ring_bytes(Self::THREADS),
        copy_to_all(coop, dsts, src, bytes, smem) => ring_copy(coop, dsts, src, bytes, smem),
        reduce_to_all<T, O>(coop, dsts, srcs, count, smem) => {
            ring_reduce::<T, O>(coop, dsts, srcs, count, smem)
        },
    }
}
