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
/// `q % n`, so the ring stays full whatever the number of sources. Two, four or eight sources
/// (the worlds of one node) of types of at most 8 lanes per vector take
/// [`ring_reduce_unrolled`] over the whole groups first.
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
    // Vectors of more than 8 lanes (the fp8 types) keep the general loop: a written-out pass
    // of 16-lane accumulators and their conversions needs more registers than a thread has
    // (ptxas spilled e4m3's thousands of times at 255 registers).
    // SAFETY (all arms): forwarded contract; each arm's source count is the slice's.
    let first_group = unsafe {
        match srcs.len() {
            _ if T::LANES > 8 => 0,
            2 => ring_reduce_unrolled::<T, O, 2>(&ring, dsts, srcs),
            4 => ring_reduce_unrolled::<T, O, 4>(&ring, dsts, srcs),
            8 => ring_reduce_unrolled::<T, O, 8>(&ring, dsts, srcs),
            _ => 0,
        }
    };
    // SAFETY: forwarded contract.
    unsafe { ring_reduce_from::<T, O>(&ring, dsts, srcs, first_group) };
    // SAFETY: the tail lies within `count`.
    unsafe { reduce_scalar::<T, O>(coop, dsts, srcs, ring.vectors * T::LANES, count) };
}

/// The ring's groups `first_group..` of every source, for any number of sources: the general
/// form, which works out each item's (group, source) and the bounds of its vectors as it goes.
///
/// # Safety
/// As [`ring_reduce`]; no copy into the ring is in flight.
#[inline(always)]
unsafe fn ring_reduce_from<T: Element, O: ReduceOp>(
    ring: &Ring,
    dsts: &[*mut T],
    srcs: &[*const T],
    first_group: usize,
) {
    let n = srcs.len();
    let items = ring.groups().saturating_sub(first_group) * n;
    // (group, source) of the next item to load.
    let (mut load_group, mut load_source) = (first_group, 0usize);
    for q in 0..STAGES {
        if q < items {
            // SAFETY: forwarded contract; the ring index of item q is q % STAGES.
            unsafe { ring.load_item(srcs[load_source] as *const u8, load_group, q) };
            advance(&mut load_group, &mut load_source, n);
        }
        arch::cp_async_commit();
    }
    let (mut acc0, mut acc1) = (T::Lanes::default(), T::Lanes::default());
    let (mut group, mut source) = (first_group, 0usize);
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
}

/// The ring over `N` sources (`N` divides [`STAGES`]) for the whole groups, written out: one
/// pass of the loop is `STAGES` items (`STAGES / N` groups of every source), so every item's
/// stage, source and group within the pass are constants. The sources' addresses then stay in
/// registers and no vector needs a bounds check; the loop keeps only this thread's byte offset
/// of the pass. (The general loop spent ~190 instructions per item on sm_90 on that
/// bookkeeping, for ~40 of data.) Returns the groups done: the general loop takes the rest.
///
/// # Safety
/// As [`ring_reduce`], with `srcs.len() == N`; no copy into the ring is in flight.
#[inline(always)]
unsafe fn ring_reduce_unrolled<T: Element, O: ReduceOp, const N: usize>(
    ring: &Ring,
    dsts: &[*mut T],
    srcs: &[*const T],
) -> usize {
    const { assert!(STAGES == 8 && STAGES.is_multiple_of(N), "one pass is seq!(J in 0..8)") };
    let groups_per_pass = STAGES / N;
    let size = ring.coop.size as usize;
    let group_vectors = VECTORS_PER_STAGE * size;
    let passes = ring.vectors / (group_vectors * groups_per_pass);
    if passes == 0 {
        return 0;
    }
    // Byte strides: between a thread's two vectors of a group, and between groups.
    let (vector_stride, group_stride) = (size * 16, group_vectors * 16);
    let pass_stride = group_stride * groups_per_pass;
    let src: [*const u8; N] = core::array::from_fn(|s| srcs[s] as *const u8);
    // This thread's offset in pass 0; item `J` of a pass is group `J / N` of source `J % N`.
    let mut at = ring.coop.index as usize * 16;
    // SAFETY (every copy): pass `p < passes` covers whole groups inside every source.
    seq!(J in 0..8 {
        let from = src[J % N].wrapping_add(at + (J / N) * group_stride);
        unsafe {
            arch::cp_async_16(ring.slot(J, 0), from);
            arch::cp_async_16(ring.slot(J, 1), from.wrapping_add(vector_stride));
        }
        arch::cp_async_commit();
    });
    let (mut acc0, mut acc1) = (T::Lanes::default(), T::Lanes::default());
    for pass in 0..passes {
        let next = pass + 1 < passes;
        seq!(J in 0..8 {
            arch::cp_async_wait::<{ STAGES as u32 - 1 }>();
            // SAFETY: this thread's slots of stage J; their copies completed.
            let (raw0, raw1) = unsafe {
                (
                    arch::ld_shared_v128(ring.slot(J, 0) as *const u128),
                    arch::ld_shared_v128(ring.slot(J, 1) as *const u128),
                )
            };
            if J % N == 0 {
                acc0 = T::unpack(raw0);
                acc1 = T::unpack(raw1);
            } else {
                combine_into::<T, O>(&mut acc0, raw0);
                combine_into::<T, O>(&mut acc1, raw1);
            }
            if J % N == N - 1 {
                let (packed0, packed1) = (T::pack(acc0), T::pack(acc1));
                let to = at + (J / N) * group_stride;
                for dst in dsts {
                    let dst = (*dst as *mut u8).wrapping_add(to);
                    // SAFETY: the group lies inside every destination.
                    unsafe {
                        arch::st_v128(dst as *mut u128, packed0);
                        arch::st_v128(dst.wrapping_add(vector_stride) as *mut u128, packed1);
                    }
                }
            }
            if next {
                // The same item of the next pass, into the stage just drained.
                let from = src[J % N].wrapping_add(at + pass_stride + (J / N) * group_stride);
                // SAFETY: pass + 1 < passes; the stage's registers were read above.
                unsafe {
                    arch::cp_async_16(ring.slot(J, 0), from);
                    arch::cp_async_16(ring.slot(J, 1), from.wrapping_add(vector_stride));
                }
            }
            arch::cp_async_commit();
        });
        at += pass_stride;
    }
    arch::cp_async_wait::<0>();
    passes * groups_per_pass
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
