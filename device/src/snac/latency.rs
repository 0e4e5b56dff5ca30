//! The latency regime: packets instead of staging + signals, so a small call costs one trip
//! over the interconnect and no flag round trips.
//!
//! The payload is cut into 16-byte units; a unit travels as two packets (32 bytes). Rank `R`'s
//! window for sender `S` in half `h` is `staging[R] + latency_offset(h) + S × window`.
//! Each collective's packet path (its own file under `collective/`) is made of the pieces
//! here: a sender stores each unit straight into the window each reader keeps for it
//! ([`put_unit`], [`put_to_peers`], [`scatter_unit`]), and a reader polls its windows and copies
//! or reduces the units into `dst` ([`gather_unit`], [`gather_unit_of`]). One trip over the
//! interconnect, no signals, no staging copy.
//!
//! Reductions reduce each element in `f32` in rank order and round once, as the Atoms do, so
//! every path gives the same bits. All `blocks × threads` threads stride over the units; the
//! same thread reads a unit of `src` and later writes it to `dst`, so `src == dst` is allowed.

use super::fault::SignalKind;
use super::packet;
use super::sync::{Call, DIGEST_WARP, Left};
use super::transfer::Reducer;
use crate::arch;
use crate::context::MAX_RANKS;

/// Bytes of window per unit (two packets).
pub(crate) const UNIT_WINDOW: u64 = 32;

/// Units of a payload.
#[inline(always)]
pub(crate) const fn units(bytes: u64) -> u64 {
    bytes.div_ceil(16)
}

/// Whether one-shot fits a window of `window` bytes.
#[inline(always)]
pub(crate) const fn one_shot_fits(bytes: u64, window: u64) -> bool {
    units(bytes) * UNIT_WINDOW <= window
}

/// The `u`-th unit of a `bytes`-byte buffer, zero-padded past the end.
///
/// # Safety
/// `src` is valid for `bytes`.
#[inline(always)]
pub(crate) unsafe fn load_unit(src: *const u8, u: u64, bytes: u64) -> u128 {
    let at = u * 16;
    if at + 16 <= bytes && (src as usize) & 15 == 0 {
        // SAFETY: a whole aligned unit inside the buffer.
        return unsafe { arch::ld_v128(src.add(at as usize) as *const u128) };
    }
    // SAFETY: forwarded contract.
    unsafe { load_unit_bytes(src, at, bytes) }
}

/// [`load_unit`] byte by byte: a payload's last unit, or an unaligned `src`. Out of line (and
/// cold), so the loop's sixteen byte loads do not add to the registers of the packet paths.
///
/// # Safety
/// As [`load_unit`]; `at` is the unit's first byte.
#[cold]
#[inline(never)]
unsafe fn load_unit_bytes(src: *const u8, at: u64, bytes: u64) -> u128 {
    let mut v = 0u128;
    let mut i = 0;
    while i < 16 && at + i < bytes {
        // SAFETY: inside the buffer.
        v |= (unsafe { src.add((at + i) as usize).read() } as u128) << (8 * i);
        i += 1;
    }
    v
}

/// Writes the `u`-th unit of a `bytes`-byte buffer, dropping what lies past the end.
///
/// # Safety
/// `dst` is valid for `bytes`.
#[inline(always)]
pub(crate) unsafe fn store_unit(dst: *mut u8, u: u64, bytes: u64, v: u128) {
    let at = u * 16;
    if at + 16 <= bytes && (dst as usize) & 15 == 0 {
        // SAFETY: a whole aligned unit inside the buffer.
        return unsafe { arch::st_v128(dst.add(at as usize) as *mut u128, v) };
    }
    // SAFETY: forwarded contract.
    unsafe { store_unit_bytes(dst, at, bytes, v) }
}

/// [`store_unit`] byte by byte (see [`load_unit_bytes`]).
///
/// # Safety
/// As [`store_unit`]; `at` is the unit's first byte.
#[cold]
#[inline(never)]
unsafe fn store_unit_bytes(dst: *mut u8, at: u64, bytes: u64, v: u128) {
    let mut i = 0;
    while i < 16 && at + i < bytes {
        // SAFETY: inside the buffer.
        unsafe { dst.add((at + i) as usize).write((v >> (8 * i)) as u8) };
        i += 1;
    }
}

/// Sends a unit as two packets to slot `index` of a window.
///
/// # Safety
/// The window holds at least `index + 1` units.
#[inline(always)]
pub(crate) unsafe fn put_unit(window: *mut u8, index: u64, v: u128, flag: u32) {
    // SAFETY: both packets lie in the window.
    unsafe {
        let p = window.add((index * UNIT_WINDOW) as usize);
        packet::put(p, v as u64, flag);
        packet::put(p.add(16), (v >> 64) as u64, flag);
    }
}

/// Sends unit `index` to every peer: into the window each keeps for this rank.
///
/// # Safety
/// Every peer's window for this rank holds at least `index + 1` units.
#[inline(always)]
pub(crate) unsafe fn put_to_peers(w: &Windows, index: u64, v: u128, flag: u32) {
    for q in 0..w.world {
        if q != w.me {
            // SAFETY: the caller's contract.
            unsafe { put_unit(w.to(q), index, v, flag) };
        }
    }
}

/// [`get_unit`] out of line: the wait for a unit that was not there at the first look, kept
/// out of the unrolled loops that look at several ranks' units at once.
///
/// # Safety
/// As [`get_unit`].
#[inline(never)]
pub(crate) unsafe fn await_unit(
    call: &Call,
    window: *const u8,
    index: u64,
    flag: u32,
    peer: u32,
) -> Result<u128, Left> {
    // SAFETY: forwarded contract.
    unsafe { get_unit(call, window, index, flag, peer) }
}

/// Waits for the unit in slot `index` of a window that `peer` writes (both packets polled
/// together).
///
/// # Safety
/// The window holds at least `index + 1` units.
#[inline(always)]
pub(crate) unsafe fn get_unit(
    call: &Call,
    window: *const u8,
    index: u64,
    flag: u32,
    peer: u32,
) -> Result<u128, Left> {
    // SAFETY: both packets lie in the window.
    let p = unsafe { window.add((index * UNIT_WINDOW) as usize) };
    let mut unit = 0;
    call.spin(peer, SignalKind::Packet, flag as u64, || {
        // SAFETY: as above.
        match unsafe { packet::try_get_unit(p, flag) } {
            Ok(v) => {
                unit = v;
                None
            }
            Err(seen) => Some(seen),
        }
    })?;
    Ok(unit)
}

/// Where one call's latency windows lie, read from the context once per packet path: the
/// window every peer keeps for this rank (written) and the ones this rank keeps for its peers
/// (read). Each packet store or poll is an `asm!` block that may touch any memory, after which
/// the compiler reloads whatever it reads from memory: taken from the context at every packet,
/// an address cost a chain of dependent loads (the context's address from the caller's frame,
/// then its fields). From here a peer's window costs one load (its staging base), and this
/// rank's own windows none.
#[derive(Clone, Copy)]
pub(crate) struct Windows<'a> {
    /// Every rank's staging base, as this rank addresses it.
    staging: &'a [u64; MAX_RANKS],
    /// Offset in a rank's staging slab of the window it keeps for this rank.
    outgoing: u64,
    /// Address of the window this rank keeps for rank 0; rank `p`'s follows at `p × bytes`.
    incoming: u64,
    /// Bytes of one window.
    bytes: u64,
    /// This rank.
    pub(crate) me: u32,
    /// Ranks in the communicator.
    pub(crate) world: u32,
}

impl<'a> Windows<'a> {
    /// The windows of `call`'s half.
    #[inline(always)]
    pub(crate) fn of(call: &Call<'a>) -> Self {
        let ctx = call.ctx;
        let layout = ctx.layout();
        let offset = layout.latency_offset(call.half());
        let bytes = layout.latency_window_bytes;
        let me = ctx.rank;
        Windows {
            staging: &ctx.staging,
            outgoing: offset + me as u64 * bytes,
            incoming: ctx.staging[me as usize] + offset,
            bytes,
            me,
            world: ctx.world,
        }
    }

    /// The window rank `rank` keeps for this rank (where this rank's packets to it go).
    #[inline(always)]
    pub(crate) fn to(&self, rank: u32) -> *mut u8 {
        (self.staging[rank as usize] + self.outgoing) as *mut u8
    }

    /// The window this rank keeps for `sender` (where its packets arrive).
    #[inline(always)]
    pub(crate) fn from(&self, sender: u32) -> *mut u8 {
        (self.incoming + sender as u64 * self.bytes) as *mut u8
    }
}

/// Ranks whose packets one thread loads before it decodes any.
const IN_FLIGHT: u32 = 8;

/// Runs `$body` once for each `$i` in `0..IN_FLIGHT`, written out (see `unrolled!`).
macro_rules! in_flight {
    ($i:ident => $body:block) => {{
        const _: () = assert!(IN_FLIGHT == 8);
        unrolled!([0 1 2 3 4 5 6 7], $i: u32 => $body)
    }};
}

/// Waits until unit `index` of every rank `base + i` whose bit `i` is set in `missing` is in
/// this rank's window, every poll loading all the units still missing at once: awaited one
/// rank after another, each unit that had come meanwhile still cost a round trip of its own,
/// so a rank that looked before its peers had sent noticed the last of them up to
/// `IN_FLIGHT` round trips late (AllGatherV at 8 ranks on an H100, run 11: the ranks that
/// entered first received 5-6 µs after the last rank sent, that rank 2.4 µs after). Out of line,
/// like [`await_unit`]: kept out of the unrolled loops that look at units already there.
///
/// # Safety
/// The window here of every rank `missing` names holds at least `index + 1` units.
#[inline(never)]
unsafe fn await_units(
    call: &Call,
    w: &Windows,
    index: u64,
    flag: u32,
    base: u32,
    mut missing: u32,
) -> Result<(), Left> {
    while missing != 0 {
        // The wait names a rank whose unit is still missing, so a timeout names the right one.
        let first = missing.trailing_zeros();
        call.spin(base + first, SignalKind::Packet, flag as u64, || {
            let mut raw = [[[0u64; 2]; 2]; IN_FLIGHT as usize];
            in_flight!(i => {
                if missing & (1 << i) != 0 {
                    // SAFETY: the window holds the unit (the caller's contract).
                    raw[i as usize] = unsafe {
                        packet::load_pair(w.from(base + i).add((index * UNIT_WINDOW) as usize))
                    };
                }
            });
            let mut seen = 0;
            in_flight!(i => {
                if missing & (1 << i) != 0 {
                    match packet::decode_unit(raw[i as usize], flag) {
                        Ok(_) => missing &= !(1 << i),
                        Err(s) if i == first => seen = s,
                        Err(_) => {}
                    }
                }
            });
            (missing & (1 << first) != 0).then_some(seen)
        })?;
    }
    Ok(())
}

/// Unit `index` of every rank's window here, in rank order, handed to `each(rank, unit)`: the
/// packets of [`IN_FLIGHT`] ranks are loaded before any is decoded, so units already there
/// cost one round trip together rather than one each; a unit not there yet is then awaited
/// alone. `own`, when given, is this rank's unit (not read from its window).
///
/// # Safety
/// Every rank's window here holds at least `index + 1` units.
#[inline(always)]
pub(crate) unsafe fn gather_unit<E: FnMut(u32, u128)>(
    call: &Call,
    w: &Windows,
    index: u64,
    flag: u32,
    own: Option<u128>,
    each: E,
) -> Result<(), Left> {
    // SAFETY: forwarded contract.
    unsafe { gather_unit_of::<false, _>(call, w, index, flag, own, |_| true, each) }
}

/// [`gather_unit`] over the ranks `present(rank)` names (the V forms: the ranks whose part
/// holds unit `index`); the others are neither read nor handed to `each`. With `TOGETHER`,
/// the units missing at the first look are awaited together ([`await_units`]), not one rank
/// after another: AllGatherV's, whose ranks enter microseconds apart, so the first to enter
/// miss every peer (AllGatherV 1 KiB at 8 ranks on an H100: 13.7 → 10.6 µs, run 13). The other
/// paths keep the one-by-one wait: with the wait-together in them, the fixed forms' kernels
/// spilled more and ran slower (AllGather, ReduceScatter and AllToAll lost most of 0.8-1.2 µs,
/// AllReduce up to 4 µs; `benches/RESULTS.md`, run 12), and AllToAllV ran 0.7-1.4 µs slower
/// at 1-32 KiB (run 14).
///
/// # Safety
/// The window here of every rank `present` names holds at least `index + 1` units.
#[inline(always)]
pub(crate) unsafe fn gather_unit_of<const TOGETHER: bool, E: FnMut(u32, u128)>(
    call: &Call,
    w: &Windows,
    index: u64,
    flag: u32,
    own: Option<u128>,
    present: impl Fn(u32) -> bool,
    mut each: E,
) -> Result<(), Left> {
    let (me, world) = (w.me, w.world);
    let slot = |p: u32| -> *const u8 {
        // SAFETY: the window holds the unit (the caller's contract).
        unsafe { w.from(p).add((index * UNIT_WINDOW) as usize) }
    };
    let mut base = 0;
    while base < world {
        let mut raw = [[[0u64; 2]; 2]; IN_FLIGHT as usize];
        let mut read = 0u32;
        in_flight!(i => {
            let p = base + i;
            if p < world && !(p == me && own.is_some()) && present(p) {
                read |= 1 << i;
                // SAFETY: both packets of the unit lie in the window.
                raw[i as usize] = unsafe { packet::load_pair(slot(p)) };
            }
        });
        let mut missing = 0u32;
        if TOGETHER {
            in_flight!(i => {
                if read & (1 << i) != 0 && packet::decode_unit(raw[i as usize], flag).is_err() {
                    missing |= 1 << i;
                }
            });
        }
        if missing != 0 {
            // SAFETY: forwarded contract.
            unsafe { await_units(call, w, index, flag, base, missing)? };
            in_flight!(i => {
                if missing & (1 << i) != 0 {
                    // SAFETY: as above.
                    raw[i as usize] = unsafe { packet::load_pair(slot(base + i)) };
                }
            });
        }
        in_flight!(i => {
            let p = base + i;
            if p < world && present(p) {
                let unit = match own {
                    Some(v) if p == me => v,
                    _ => match packet::decode_unit(raw[i as usize], flag) {
                        Ok(v) => v,
                        // SAFETY: as above.
                        Err(_) => unsafe { await_unit(call, w.from(p), index, flag, p)? },
                    },
                };
                each(p, unit);
            }
        });
        base += IN_FLIGHT;
    }
    Ok(())
}

/// Sends unit `index` of the part of every rank `present(q)` names to that rank (into the
/// window it keeps for this rank), `part(q)` loading part q's unit, and returns this rank's own
/// unit (not sent; 0 unless `present(me)`). The units of [`IN_FLIGHT`] ranks are loaded before
/// any is sent: a load waits for its bytes only where they are used, and the packet stores are
/// ordered after it, so loading and sending each in turn costs a memory round trip per rank
/// (ReduceScatter at 8 ranks on the H200: 2.9 µs from announcing to the last packet sent,
/// against 1.7 for AllGather's one load).
///
/// # Safety
/// The window for this rank of every peer `present` names holds at least `index + 1` units;
/// `part(q)` may be called for every rank `q` that `present` names.
#[inline(always)]
pub(crate) unsafe fn scatter_unit(
    w: &Windows,
    index: u64,
    flag: u32,
    present: impl Fn(u32) -> bool,
    part: impl Fn(u32) -> u128,
) -> u128 {
    let (me, world) = (w.me, w.world);
    let mut own = 0;
    let mut base = 0;
    while base < world {
        let mut units = [0u128; IN_FLIGHT as usize];
        in_flight!(i => {
            if base + i < world && present(base + i) {
                units[i as usize] = part(base + i);
            }
        });
        in_flight!(i => {
            let q = base + i;
            if q == me {
                own = units[i as usize];
            } else if q < world && present(q) {
                // SAFETY: rank q's window for this rank holds the unit (the caller's contract).
                unsafe { put_unit(w.to(q), index, units[i as usize], flag) };
            }
        });
        base += IN_FLIGHT;
    }
    own
}

/// This thread's share of a packet path's units: its first unit, the stride, and whether
/// block 0's last warp is kept out of the data to check the digests meanwhile
/// ([`Call::check_digests_early`]). The call's `blocks × threads` threads take the units in
/// turn; the warp is kept when [`Call::keeps_digest_warp`] allows it and the other threads
/// still take the call's longest loop (`most` units) in one pass: a thread given one more unit
/// than its peers would wait for it alone, a round trip more than the overlap saves (AllReduce
/// of 32 KiB at 8 ranks on 8 × 256 threads: 12.4 -> 13.2 µs on the H200 when it was kept
/// anyway). Longer loops check at the end. (No division: it would run before the first
/// packet leaves.)
#[inline(always)]
pub(crate) fn lanes(call: &Call, blocks: u32, most: u64) -> Lanes {
    let (block, threads, tid) = (call.block as u64, call.threads as u64, call.tid as u64);
    let lane = block * threads + tid;
    let all = blocks as u64 * threads;
    const KEPT: u64 = DIGEST_WARP as u64;
    let kept = call.keeps_digest_warp() && most.saturating_add(KEPT) <= all;
    let (first, stride) = match (kept, block) {
        (false, _) => (lane, all),
        (true, 0) if tid >= threads - KEPT => (u64::MAX, all - KEPT),
        (true, 0) => (lane, all - KEPT),
        (true, _) => (lane - KEPT, all - KEPT),
    };
    Lanes {
        first,
        stride,
        warp_kept: kept,
    }
}

/// What [`lanes`] gives a thread.
#[derive(Clone, Copy)]
pub(crate) struct Lanes {
    /// This thread's first unit.
    pub(crate) first: u64,
    /// Units between two of this thread's.
    pub(crate) stride: u64,
    /// Whether block 0's last warp checks the digests meanwhile.
    pub(crate) warp_kept: bool,
}

/// Copies units `first, first + stride, …` of a `len`-byte buffer through registers.
///
/// # Safety
/// Both valid for `len` bytes and not overlapping.
#[inline(always)]
unsafe fn copy_units(src: *const u8, dst: *mut u8, len: u64, first: u64, stride: u64) {
    let mut u = first;
    while u < units(len) {
        // SAFETY: forwarded contract.
        unsafe { store_unit(dst, u, len, load_unit(src, u, len)) };
        u += stride;
    }
}

/// World 1 without the Atom's shared memory: `dst = src` through registers (`reduce`: rounded
/// through `f32` as every reduction), all `blocks × threads` threads striding over the units.
///
/// # Safety
/// Both valid for `len` bytes (equal, or not overlapping); every thread of every block calls.
#[inline(never)]
pub(crate) unsafe fn local<R: Reducer>(
    dst: *mut u8,
    src: *const u8,
    len: u64,
    block: u32,
    blocks: u32,
    reduce: Option<R>,
) {
    let threads = arch::block_threads() as u64;
    let first = block as u64 * threads + arch::thread_index() as u64;
    let stride = blocks as u64 * threads;
    match reduce {
        None if core::ptr::eq(src, dst) => {}
        // SAFETY: forwarded contract.
        None => unsafe { copy_units(src, dst, len, first, stride) },
        Some(r) => {
            let mut u = first;
            while u < units(len) {
                // SAFETY: forwarded contract; the same thread reads then writes unit u.
                let v = r.reduce_unit(1, |_| Ok(unsafe { load_unit(src, u, len) }));
                if let Ok(v) = v {
                    // SAFETY: forwarded contract.
                    unsafe { store_unit(dst, u, len, v) };
                }
                u += stride;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn one_shot_fits_when_checked(bytes in 0u64..1 << 22, window_units in 1u64..1 << 14) {
            let window = window_units * 32;
            if one_shot_fits(bytes, window) {
                prop_assert!(units(bytes) * UNIT_WINDOW <= window);
            }
        }
    }
}
