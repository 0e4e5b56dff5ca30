//! The register datapath: 16-byte loads straight into registers, several vectors in flight per
//! thread, strided across the group so a warp's accesses coalesce. Sm70 runs it on the GPU;
//! [`Host`] runs it on one CPU thread.

// seq! unrolls `K * stride` with K = 0, 1, ...: the `0 * stride` and `1 * stride` it writes are
// the point, not a mistake.
#![allow(clippy::erasing_op, clippy::identity_op)]

use super::{copy_bytes, reduce_scalar};
use crate::arch;
use crate::coop::Coop;
use crate::element::Element;
use crate::op::ReduceOp;
use seq_macro::seq;

/// Vectors in flight per thread in the register copy.
pub(crate) const COPY_UNROLL: usize = 8;
const _: () = assert!(
    COPY_UNROLL == 8,
    "copy() names one register per vector: seq!(K in 0..8)"
);

/// Copies the whole 16-byte vectors of `bytes` into every destination, [`COPY_UNROLL`] per
/// thread in flight, then the tail bytes.
///
/// # Safety
/// As [`Atom::copy_to_all`].
#[inline(always)]
pub(crate) unsafe fn copy_to_all(coop: Coop, dsts: &[*mut u8], src: *const u8, bytes: usize) {
    let src_v = src as *const u128;
    let vectors = bytes / 16;
    let stride = coop.size as usize;
    let step = stride * COPY_UNROLL;
    let full = vectors - vectors % step;
    let mut base = coop.index as usize;
    while base < full {
        // Unrolled by hand (seq!) so the vectors stay in registers: LLVM does not fully unroll
        // loops whose bodies are this large.
        seq!(K in 0..8 {
            // SAFETY: `base + K * stride < full <= vectors`, in bounds of every buffer.
            let r~K = unsafe { arch::ld_v128(src_v.add(base + K * stride)) };
        });
        for dst in dsts {
            let dst_v = *dst as *mut u128;
            seq!(K in 0..8 {
                // SAFETY: as above.
                unsafe { arch::st_v128(dst_v.add(base + K * stride), r~K) };
            });
        }
        base += step;
    }
    // The rest, fewer than COPY_UNROLL vectors per thread, all loaded before any is stored: a
    // small copy then waits one memory round trip, not one per vector.
    if base < vectors {
        seq!(K in 0..8 {
            let v~K = base + K * stride;
            // SAFETY: loaded only when `v~K < vectors`.
            let r~K = if v~K < vectors { unsafe { arch::ld_v128(src_v.add(v~K)) } } else { 0 };
        });
        for dst in dsts {
            let dst_v = *dst as *mut u128;
            seq!(K in 0..8 {
                if v~K < vectors {
                    // SAFETY: as above.
                    unsafe { arch::st_v128(dst_v.add(v~K), r~K) };
                }
            });
        }
    }
    // SAFETY: the tail lies within `bytes`.
    unsafe { copy_bytes(coop, dsts, src, vectors * 16, bytes) };
}

/// Reduces the whole vectors of `count` elements into every destination, then the tail, with
/// as many loads in flight per thread as the registers of a 512-thread block allow (see the
/// choice below).
///
/// # Safety
/// As [`Atom::reduce_to_all`].
#[inline(always)]
pub(crate) unsafe fn reduce_to_all<T: Element, O: ReduceOp>(
    coop: Coop,
    dsts: &[*mut T],
    srcs: &[*const T],
    count: usize,
) {
    let vectors = count / T::LANES;
    // How many sources to load before combining is bounded by registers: a 512-thread block
    // has 128 per thread. ptxas (sm_90) measured, per datapath: f32 four sources × four vectors
    // 66; bf16 two × four 90; f16 two × four 154 and e4m3 two × two 164 (too many: one source at
    // a time, 81 and 92).
    use crate::element::DataType;
    // SAFETY (all arms): forwarded contract.
    let full = match T::DTYPE {
        DataType::F32 => unsafe { reduce_vectors_by_4::<T, O, 4>(coop, dsts, srcs, vectors) },
        DataType::Bf16 => unsafe { reduce_vectors_by_4::<T, O, 2>(coop, dsts, srcs, vectors) },
        DataType::F16 => unsafe { reduce_vectors_by_4::<T, O, 1>(coop, dsts, srcs, vectors) },
        DataType::E4m3 | DataType::E5m2 => unsafe {
            reduce_vectors_by_2::<T, O, 1>(coop, dsts, srcs, vectors)
        },
    };
    let mut v = full + coop.index as usize;
    while v < vectors {
        // SAFETY: `v < vectors`.
        let mut acc = T::unpack(unsafe { arch::ld_v128((srcs[0] as *const u128).add(v)) });
        for src in &srcs[1..] {
            // SAFETY: `v < vectors`.
            combine_into::<T, O>(&mut acc, unsafe {
                arch::ld_v128((*src as *const u128).add(v))
            });
        }
        let packed = T::pack(acc);
        for dst in dsts {
            // SAFETY: `v < vectors`.
            unsafe { arch::st_v128((*dst as *mut u128).add(v), packed) };
        }
        v += coop.size as usize;
    }
    // SAFETY: the tail lies within `count`.
    unsafe { reduce_scalar::<T, O>(coop, dsts, srcs, vectors * T::LANES, count) };
}

macro_rules! reduce_vectors {
    ($name:ident, $unroll:literal) => {
        /// Reduces whole groups of `$unroll` vectors per thread into every destination; returns
        /// the vectors covered.
        /// Sources are loaded `BATCH` (1, 2 or 4) at a time, so `BATCH × $unroll` loads are in
        /// flight per thread before the first is used.
        ///
        /// # Safety
        /// As [`Atom::reduce`], for `vectors` whole vectors.
        #[inline(always)]
        unsafe fn $name<T: Element, O: ReduceOp, const BATCH: usize>(
            coop: Coop,
            dsts: &[*mut T],
            srcs: &[*const T],
            vectors: usize,
        ) -> usize {
            let stride = coop.size as usize;
            let step = stride * $unroll;
            let full = vectors - vectors % step;
            let first = srcs[0] as *const u128;
            let n = srcs.len();
            let mut base = coop.index as usize;
            // SAFETY (every load and store below): `base + K * stride < full <= vectors`, and
            // every source and destination holds `vectors` vectors.
            while base < full {
                // Named registers (seq!) rather than arrays: LLVM does not fully unroll loops
                // with bodies this large, and an array indexed in a loop goes to local memory.
                seq!(K in 0..$unroll {
                    let mut acc~K = T::unpack(unsafe { arch::ld_v128(first.add(base + K * stride)) });
                });
                let mut s = 1;
                while BATCH >= 4 && s + 4 <= n {
                    let (p0, p1, p2, p3) = (
                        srcs[s] as *const u128,
                        srcs[s + 1] as *const u128,
                        srcs[s + 2] as *const u128,
                        srcs[s + 3] as *const u128,
                    );
                    seq!(K in 0..$unroll {
                        let a~K = unsafe { arch::ld_v128(p0.add(base + K * stride)) };
                        let b~K = unsafe { arch::ld_v128(p1.add(base + K * stride)) };
                        let c~K = unsafe { arch::ld_v128(p2.add(base + K * stride)) };
                        let d~K = unsafe { arch::ld_v128(p3.add(base + K * stride)) };
                    });
                    // Combined strictly in source order.
                    seq!(K in 0..$unroll {
                        combine_into::<T, O>(&mut acc~K, a~K);
                        combine_into::<T, O>(&mut acc~K, b~K);
                        combine_into::<T, O>(&mut acc~K, c~K);
                        combine_into::<T, O>(&mut acc~K, d~K);
                    });
                    s += 4;
                }
                while BATCH >= 2 && s + 2 <= n {
                    let (p0, p1) = (srcs[s] as *const u128, srcs[s + 1] as *const u128);
                    seq!(K in 0..$unroll {
                        let a~K = unsafe { arch::ld_v128(p0.add(base + K * stride)) };
                        let b~K = unsafe { arch::ld_v128(p1.add(base + K * stride)) };
                    });
                    seq!(K in 0..$unroll {
                        combine_into::<T, O>(&mut acc~K, a~K);
                        combine_into::<T, O>(&mut acc~K, b~K);
                    });
                    s += 2;
                }
                while s < n {
                    let src_v = srcs[s] as *const u128;
                    seq!(K in 0..$unroll {
                        let r~K = unsafe { arch::ld_v128(src_v.add(base + K * stride)) };
                    });
                    seq!(K in 0..$unroll {
                        combine_into::<T, O>(&mut acc~K, r~K);
                    });
                    s += 1;
                }
                seq!(K in 0..$unroll {
                    let packed~K = T::pack(acc~K);
                });
                for dst in dsts {
                    let dst_v = *dst as *mut u128;
                    seq!(K in 0..$unroll {
                        unsafe { arch::st_v128(dst_v.add(base + K * stride), packed~K) };
                    });
                }
                base += step;
            }
            full
        }
    };
}

reduce_vectors!(reduce_vectors_by_4, 4);
reduce_vectors!(reduce_vectors_by_2, 2);

/// Folds one loaded vector into the accumulator, lane by lane.
#[inline(always)]
pub(crate) fn combine_into<T: Element, O: ReduceOp>(acc: &mut T::Lanes, raw: u128) {
    let x = T::unpack(raw);
    for (a, b) in acc.as_mut().iter_mut().zip(x.as_ref()) {
        *a = O::combine(*a, *b);
    }
}

/// The portable reference Atom: the register datapath on one CPU thread (or any group of
/// threads on a GPU). It needs no shared memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Host;

atom! {
    Host {
        name: "host",
        /// The register datapath needs no shared memory, so any block size works: as many as
        /// the CPU emulation runs (`emulation::MAX_THREADS`).
        threads: 64,
        smem: 0,
        copy_to_all(coop, dsts, src, bytes, _smem) => copy_to_all(coop, dsts, src, bytes),
        reduce_to_all<T, O>(coop, dsts, srcs, count, _smem) => {
            reduce_to_all::<T, O>(coop, dsts, srcs, count)
        },
    }
}
