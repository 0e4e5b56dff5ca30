//! AllReduce's latency regime: packets instead of staging + signals, so a small reduce costs
//! one trip over the interconnect (one-shot) or two (two-shot) and no flag round trips.
//!
//! - One-shot: every rank writes all its units into every peer's window, then reduces every
//!   unit over ranks `0..world` (its own from `src`).
//! - Two-shot: unit `u` belongs to shard `owner(u)`. Every rank writes the units of shard `q`
//!   into rank `q`'s window (lower half), reduces its own shard, writes the result into every
//!   peer's window (upper half), and copies the other shards' results from its own window.
//!
//! Both reduce each element in `f32` in rank order and round once, as the Atoms do; the
//! two-shot result packets carry the already rounded value, so every path gives the same bits.
//! The same thread reads a unit of `src` and later writes it to `dst`, so `src == dst` is
//! allowed.

use crate::element::Element;
use crate::partition::even_split;
use crate::snac::latency::{
    Lanes, UNIT_WINDOW, Windows, await_unit, gather_unit, lanes, load_unit, put_to_peers, put_unit,
    store_unit, units,
};
use crate::snac::packet;
use crate::snac::sync::{Call, Left};
use crate::snac::trace::Point;
use crate::snac::transfer::{Operator, Reducer, Typed};

/// Units of one thread loaded before any is sent or decoded in the two-shot scatter and gather.
const BATCH: u64 = 4;

/// Runs `$body` once for each `$b` in `0..BATCH`, written out (see `unrolled!`).
macro_rules! batch {
    ($b:ident => $body:block) => {{
        const _: () = assert!(BATCH == 4);
        unrolled!([0 1 2 3], $b: u64 => $body)
    }};
}

/// Whether two-shot fits: the largest shard in half a window.
#[inline(always)]
pub(crate) const fn two_shot_fits(bytes: u64, world: u64, window: u64) -> bool {
    units(bytes).div_ceil(world) * UNIT_WINDOW <= window / 2
}

/// The shard that unit `u` of `units` belongs to (the inverse of `even_split`).
#[inline(always)]
pub(crate) const fn owner(u: u64, units: u64, world: u64) -> u64 {
    let base = units / world;
    let extra = units % world;
    let pivot = extra * (base + 1);
    if u < pivot {
        u / (base + 1)
    } else {
        extra + (u - pivot) / base
    }
}

/// Reduces unit `u` over ranks `0..world` in order: this rank's from `src`, the others' from
/// their packets in slot `index` of their windows here ([`gather_unit`]).
///
/// # Safety
/// As [`one_shot`].
#[inline(always)]
unsafe fn reduce_unit<T: Element, P: Operator>(
    call: &Call,
    w: &Windows,
    op: P,
    (src, bytes): (*const u8, u64),
    u: u64,
    index: u64,
    flag: u32,
) -> Result<u128, Left> {
    let reducer = Typed::<T, P>::new(op);
    let mut acc = T::Lanes::default();
    // SAFETY: forwarded contract.
    let own = unsafe { load_unit(src, u, bytes) };
    // SAFETY: forwarded contract.
    unsafe {
        gather_unit(call, w, index, flag, Some(own), |p, v| {
            reducer.fold_unit(&mut acc, p == 0, v)
        })?
    };
    Ok(reducer.unit_of(acc))
}

/// One-shot AllReduce of `bytes` bytes of `T`.
///
/// # Safety
/// `src`/`dst` valid for `bytes` (they may be equal); the windows hold `units(bytes)` units;
/// every thread of every block of the call runs it with the same values.
#[inline(never)]
pub(super) unsafe fn one_shot<T: Element, P: Operator>(
    call: &Call,
    dst: *mut u8,
    src: *const u8,
    bytes: u64,
    blocks: u32,
    op: P,
) -> Result<(), Left> {
    let flag = packet::flag32(call.epoch);
    // The windows are taken from the context at each use (`Windows::of`), not held across the
    // loops: held beside the reduction's registers they spilled (the bf16 kernel's frame grew
    // from 320 to 480 B) and cost 2 µs at 1 MiB on an H100 (`benches/RESULTS.md`, run 11).
    let units = units(bytes);
    let Lanes {
        first,
        stride,
        warp_kept,
    } = lanes(call, blocks, units);
    let mut u = first;
    while u < units {
        // SAFETY: forwarded contract.
        let v = unsafe { load_unit(src, u, bytes) };
        // SAFETY: every peer's window for this rank holds every unit.
        unsafe { put_to_peers(&Windows::of(call), u, v, flag) };
        u += stride;
    }
    call.mark(Point::Sent);
    call.check_digests_early(warp_kept);
    let mut u = first;
    while u < units {
        // SAFETY: forwarded contract.
        let v =
            unsafe { reduce_unit::<T, P>(call, &Windows::of(call), op, (src, bytes), u, u, flag)? };
        // SAFETY: forwarded contract.
        unsafe { store_unit(dst, u, bytes, v) };
        u += stride;
    }
    call.mark(Point::Received);
    Ok(())
}

/// Two-shot AllReduce of `bytes` bytes of `T` (reduce-scatter and all-gather over packets).
///
/// # Safety
/// As [`one_shot`], with the largest shard fitting half a window.
#[inline(never)]
pub(super) unsafe fn two_shot<T: Element, P: Operator>(
    call: &Call,
    dst: *mut u8,
    src: *const u8,
    bytes: u64,
    blocks: u32,
    op: P,
) -> Result<(), Left> {
    let (me, world) = (call.me(), call.world());
    let flag = packet::flag32(call.epoch);
    let units = units(bytes);
    let results = call.ctx.latency_window_bytes / 2;
    let shard_first = |q: u64| even_split(units as usize, world as usize, q as usize).0 as u64;
    let (mine, my_len) = even_split(units as usize, world as usize, me as usize);
    let (mine, my_len) = (mine as u64, my_len as u64);
    let Lanes {
        first,
        stride,
        warp_kept,
    } = lanes(call, blocks, units);

    // 1. Scatter: the units of shard q to rank q, `BATCH` of this thread's units loaded before
    // any is sent (each packet store waits for its unit's load).
    let mut u = first;
    while u < units {
        let mut v = [0u128; BATCH as usize];
        batch!(b => {
            let ub = u + b * stride;
            if ub < units {
                // SAFETY: forwarded contract.
                v[b as usize] = unsafe { load_unit(src, ub, bytes) };
            }
        });
        batch!(b => {
            let ub = u + b * stride;
            if ub < units {
                let q = owner(ub, units, world as u64);
                if q != me as u64 {
                    // SAFETY: forwarded contract; shard q fits the lower half of q's window.
                    unsafe {
                        put_unit(
                            Windows::of(call).to(q as u32),
                            ub - shard_first(q),
                            v[b as usize],
                            flag,
                        )
                    };
                }
            }
        });
        u += BATCH * stride;
    }
    call.mark(Point::Sent);
    call.check_digests_early(warp_kept);
    // 2. Reduce this rank's shard, keep it, and send it to every peer.
    let mut i = first;
    while i < my_len {
        let u = mine + i;
        // SAFETY: forwarded contract.
        let v =
            unsafe { reduce_unit::<T, P>(call, &Windows::of(call), op, (src, bytes), u, i, flag)? };
        // SAFETY: forwarded contract.
        unsafe { store_unit(dst, u, bytes, v) };
        for q in 0..world {
            if q != me {
                // SAFETY: the result lies in the upper half of q's window for this rank.
                unsafe { put_unit(Windows::of(call).to(q).add(results as usize), i, v, flag) };
            }
        }
        i += stride;
    }
    // 3. Gather the other shards' results, the packets of `BATCH` of this thread's units loaded
    // before any is decoded; a unit not there yet is then awaited alone.
    let mut u = first;
    while u < units {
        let mut slot = [core::ptr::null::<u8>(); BATCH as usize];
        let mut raw = [[[0u64; 2]; 2]; BATCH as usize];
        batch!(b => {
            let ub = u + b * stride;
            if ub < units {
                let q = owner(ub, units, world as u64);
                if q != me as u64 {
                    // SAFETY: rank q's results lie in the upper half of its window here.
                    let at = unsafe {
                        Windows::of(call)
                            .from(q as u32)
                            .add((results + (ub - shard_first(q)) * UNIT_WINDOW) as usize)
                    };
                    slot[b as usize] = at;
                    // SAFETY: as above.
                    raw[b as usize] = unsafe { packet::load_pair(at) };
                }
            }
        });
        batch!(b => {
            let ub = u + b * stride;
            let at = slot[b as usize];
            if !at.is_null() {
                let v = match packet::decode_unit(raw[b as usize], flag) {
                    Ok(v) => v,
                    // SAFETY: as above.
                    Err(_) => unsafe {
                        await_unit(call, at, 0, flag, owner(ub, units, world as u64) as u32)?
                    },
                };
                // SAFETY: forwarded contract.
                unsafe { store_unit(dst, ub, bytes, v) };
            }
        });
        u += BATCH * stride;
    }
    call.mark(Point::Received);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snac::latency::one_shot_fits;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn owner_inverts_even_split(units in 0u64..5000, world in 1u64..=16) {
            for q in 0..world {
                let (first, len) = even_split(units as usize, world as usize, q as usize);
                for u in first..first + len {
                    prop_assert_eq!(owner(u as u64, units, world), q);
                }
            }
        }

        #[test]
        fn shards_fit_when_checked(bytes in 0u64..1 << 22, world in 1u64..=16, window_units in 1u64..1 << 14) {
            let window = window_units * 32;
            if two_shot_fits(bytes, world, window) {
                let (_, len) = even_split(units(bytes) as usize, world as usize, 0);
                prop_assert!(len as u64 * UNIT_WINDOW <= window / 2);
            }
            if one_shot_fits(bytes, window) {
                prop_assert!(units(bytes) * UNIT_WINDOW <= window);
            }
        }
    }
}
