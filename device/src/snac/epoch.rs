//! Epoch, flag and slot arithmetic: pure `const fn`s, property-tested on the host.
//!
//! Every block of every rank holds the same epoch `e` at the start of a call. The parity of
//! `e` selects the staging half, chunk `i` of a stream is announced with flag `e + i + 1`, and
//! the call ends by advancing `e` by `rounds | 1`, where `rounds` (at least 1) is the largest
//! number of chunks any stream of the call had, on any rank. So:
//! - flags only grow: the next call's first flag is larger than this call's last;
//! - the advance is odd: back-to-back calls use alternate halves, so a producer of call `n+1`
//!   never overwrites what a slow consumer of call `n` is still reading;
//! - all ranks advance equally, because `rounds` is agreed (from sizes every rank knows, or
//!   exchanged in-kernel).
//!
//! ```
//! use purlin_device::snac::epoch;
//! let e = 6;
//! assert_eq!(epoch::half(e), 0);
//! assert_eq!(epoch::flag(e, 0), 7);
//! assert_eq!(epoch::advance(e, 4), 11); // 4 | 1 = 5: parity flips
//! assert_eq!(epoch::half(epoch::advance(e, 4)), 1);
//! ```

use crate::context::MAX_CHUNKS;

/// The staging half (0 or 1) epoch `e` uses.
#[inline(always)]
pub const fn half(e: u64) -> u64 {
    e & 1
}

/// The flag announcing chunk `chunk` of a call at epoch `e`.
#[inline(always)]
pub const fn flag(e: u64, chunk: u64) -> u64 {
    e + chunk + 1
}

/// The epoch after a call at `e` whose streams had at most `rounds` chunks: always odd steps,
/// so the half alternates.
#[inline(always)]
pub const fn advance(e: u64, rounds: u64) -> u64 {
    e + (rounds | 1)
}

/// Chunks (flags) of a stream of `len` bytes in chunks of `chunk` bytes. An empty stream still
/// posts one flag, so its receiver knows the sender joined the call.
#[inline(always)]
pub const fn chunks(len: u64, chunk: u64) -> u64 {
    let n = len.div_ceil(chunk);
    if n == 0 { 1 } else { n }
}

/// The chunk size a call uses: the plan's, rounded down to whole 16-byte units, and no larger
/// than one staging region (`half_bytes / regions`, in 16-byte units). 0 if not even one
/// 16-byte unit fits.
#[inline(always)]
pub const fn chunk_size(plan_chunk: u64, half_bytes: u64, regions: u64) -> u64 {
    let want = if plan_chunk < 16 {
        16
    } else {
        plan_chunk & !15
    };
    let fit = (half_bytes / regions) & !15;
    if want < fit { want } else { fit }
}

/// Slots of one region: how many chunks it holds at once (at most [`MAX_CHUNKS`], which is how
/// many counters each region has). A stream with more chunks cycles through its slots.
#[inline(always)]
pub const fn slots(half_bytes: u64, regions: u64, chunk: u64) -> u64 {
    let s = half_bytes / (regions * chunk);
    if s > MAX_CHUNKS as u64 {
        MAX_CHUNKS as u64
    } else {
        s
    }
}

/// The slot chunk `i` uses.
#[inline(always)]
pub const fn slot(i: u64, slots: u64) -> u64 {
    i % slots
}

/// Before staging chunk `i` into a reused slot, the producer waits until the readers posted
/// this consumed flag (the flag of the slot's previous occupant, chunk `i - slots`); `None`
/// when chunk `i` is the slot's first occupant in this call.
#[inline(always)]
pub const fn drain_target(e: u64, i: u64, slots: u64) -> Option<u64> {
    if i >= slots {
        Some(flag(e, i - slots))
    } else {
        None
    }
}

/// Whether the readers of chunk `i` must post *consumed* for it: only if the producer will
/// reuse its slot in this call (chunk `i + slots` exists).
#[inline(always)]
pub const fn must_post_consumed(i: u64, n: u64, slots: u64) -> bool {
    i + slots < n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn advance_is_odd_and_past_every_flag(e in 0u64..1 << 60, rounds in 1u64..1 << 20) {
            let next = advance(e, rounds);
            prop_assert_ne!(half(next), half(e));
            prop_assert!(next >= flag(e, rounds - 1));
            prop_assert!(flag(next, 0) > flag(e, rounds - 1));
        }

        #[test]
        fn chunking_covers_the_stream(len in 0u64..1 << 30, chunk_units in 1u64..1 << 16) {
            let chunk = chunk_units * 16;
            let n = chunks(len, chunk);
            prop_assert!(n >= 1);
            prop_assert!((n - 1) * chunk < len.max(1));
            prop_assert!(n * chunk >= len);
        }

        #[test]
        fn chunk_fits_a_region(plan in 0u64..1 << 24, half_bytes in 0u64..1 << 24, regions in 1u64..17) {
            let c = chunk_size(plan, half_bytes, regions);
            prop_assert_eq!(c % 16, 0);
            prop_assert!(c * regions <= half_bytes);
            if c > 0 {
                let s = slots(half_bytes, regions, c);
                prop_assert!(s >= 1 && s <= MAX_CHUNKS as u64);
                prop_assert!(s * c * regions <= half_bytes);
            }
        }

        /// Cyclic staging: the drain waits of a producer and the consumed posts of its readers
        /// pair up exactly, and every slot's occupants are announced in increasing order.
        #[test]
        fn drains_pair_with_consumed_posts(e in 0u64..1 << 40, n in 1u64..2000, slots_n in 1u64..300) {
            for i in 0..n {
                if let Some(target) = drain_target(e, i, slots_n) {
                    let previous = i - slots_n;
                    prop_assert!(must_post_consumed(previous, n, slots_n));
                    prop_assert_eq!(target, flag(e, previous));
                    prop_assert_eq!(slot(previous, slots_n), slot(i, slots_n));
                }
                if must_post_consumed(i, n, slots_n) {
                    prop_assert!(drain_target(e, i + slots_n, slots_n).is_some());
                }
            }
        }
    }
}
