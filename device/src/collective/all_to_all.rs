//! AllToAll and AllToAllV: scattered → transposed, copied.

use super::CollectiveKind;
use super::entry::{Checked, Identity, check};
use super::kind::{Extent, InPlace, Semantics};
use super::streams::{Buffers, Exchange};
use crate::atom::Atom;
use crate::context::Context;
use crate::layout::{Layout, Scattered, ScatteredV, Transposed, TransposedV};
use crate::snac::digest::Digest;
use crate::snac::latency::{
    Lanes, Windows, gather_unit, gather_unit_of, lanes, load_unit, scatter_unit, store_unit, units,
};
use crate::snac::packet;
use crate::snac::symmetric::PeerAccess;
use crate::snac::sync::{Call, Left};
use crate::snac::trace::Point;
use crate::snac::{Config, SnacArgs};

/// AllToAll: both buffers hold a part for every rank and may not overlap; over symmetric inputs
/// each rank pulls its part of every rank's.
pub(crate) const ALL_TO_ALL: Semantics = Semantics {
    counts_per_rank: 0,
    src: Extent::All,
    dst: Extent::All,
    in_place: InPlace::Never,
    peers: PeerAccess::Read,
};

/// AllToAllV: two counts per rank (sent to it, received from it). A rank cannot compute where
/// its part lies in a peer's input, so the one pass runs only where the ranks exchange their
/// buffers' addresses (ordinary buffers the peers reach): each rank announces to each peer
/// where its part for it starts, and the peer pulls it. Symmetric buffers of ranks in
/// several processes stage (packets when small).
pub(crate) const ALL_TO_ALL_V: Semantics = Semantics {
    counts_per_rank: 2,
    peers: PeerAccess::ReadAnnounced,
    ..ALL_TO_ALL
};

/// AllToAll: part `q` of rank `p`'s `src` becomes part `p` of rank `q`'s `dst` (both
/// `world × args.bytes` bytes). Not in place.
///
/// # Safety
/// As [`all_reduce`](super::all_reduce), with the sizes above.
#[inline(always)]
pub unsafe fn all_to_all<A: Atom, C: Config>(args: &SnacArgs, ctx: &Context) {
    let Some(c) = check::<A, C, { CollectiveKind::AllToAll as u32 }>(args, ctx, 1) else {
        return;
    };
    let (src, dst) = (
        Scattered { bytes: args.bytes },
        Transposed { bytes: args.bytes },
    );
    let digest = Identity::copy(1).digest(&c, args.bytes, 0);
    if ctx.world > 1 && args.bytes > 0 && c.lean() {
        let (dst, src, bytes, blocks) = (args.dst, args.src, args.bytes, args.blocks);
        // SAFETY: forwarded contract; every part fits a window (`lean`).
        return unsafe { c.packets::<A>(&digest, |call| packets(call, dst, src, bytes, blocks)) };
    }
    let empty_call = args.bytes == 0;
    // SAFETY: forwarded contract.
    unsafe { exchange_with::<A, C, _, _, _>(&c, src, dst, &digest, empty_call) }
}

/// AllToAllV: `args.counts` holds `2 × world` counts: the elements this rank sends to each
/// rank, then the elements it receives from each rank (what rank `p` sends here must equal
/// what this rank receives from `p`: a mismatch is a fault naming both ranks). `src` and `dst`
/// hold the parts in rank order. Counts above `args.max_count`, or that need more than
/// `args.src_bytes` / `args.dst_bytes`, are refused before any byte moves.
///
/// # Safety
/// As [`all_to_all`]; `args.counts` valid for `2 × world` values while the call runs.
#[inline(always)]
pub unsafe fn all_to_all_v<A: Atom, C: Config>(args: &SnacArgs, ctx: &Context) {
    let elem = args.elem_bytes as u64;
    let Some(mut c) = check::<A, C, { CollectiveKind::AllToAllV as u32 }>(args, ctx, elem) else {
        return;
    };
    // SAFETY: forwarded contract (`2 × world` counts).
    let Some(v) = (unsafe { c.validated_counts::<A>(elem) }) else {
        return;
    };
    // SAFETY (both): AllToAllV's validated counts and starts hold 2 × world values.
    let ((sent, sent_at), (received, received_at)) =
        unsafe { (v.half(0, ctx.world), v.half(1, ctx.world)) };
    let src = ScatteredV {
        counts: sent,
        starts: sent_at,
        elem_bytes: args.elem_bytes,
    };
    let dst = TransposedV {
        counts: received,
        starts: received_at,
        elem_bytes: args.elem_bytes,
    };
    let digest = Identity::copy(args.elem_bytes).digest(&c, args.max_count, v.word);
    if ctx.world > 1 && c.lean() {
        let (d, s, blocks) = (args.dst, args.src, args.blocks);
        // SAFETY: forwarded contract; every part fits a window (`lean`: no count is above
        // `max_count`); the counts are validated.
        return unsafe {
            c.packets::<A>(&digest, |call| packets_v(call, (d, dst), (s, src), blocks))
        };
    }
    // AllToAllV always runs the protocol: a rank with nothing to send or receive still agrees
    // on the size with the others.
    // SAFETY: forwarded contract.
    unsafe { exchange_with::<A, C, _, _, _>(&c, src, dst, &digest, false) }
}

/// AllToAll over packets, one trip: each thread sends its units of part `q` of `src` to rank
/// `q` and copies its units of this rank's own part, then copies the same units of every
/// peer's part for this rank from the windows here.
///
/// # Safety
/// As [`all_to_all`]; every part fits a latency window; every thread of every block of the
/// call runs it with the same values.
#[inline(never)]
unsafe fn packets(
    call: &Call,
    dst: *mut u8,
    src: *const u8,
    bytes: u64,
    blocks: u32,
) -> Result<(), Left> {
    let me = call.me();
    let flag = packet::flag32(call.epoch);
    let w = Windows::of(call);
    let units = units(bytes);
    let at = |p: u32| (p as u64 * bytes) as usize;
    let Lanes {
        first,
        stride,
        warp_kept,
    } = lanes(call, blocks, units);
    let mut u = first;
    while u < units {
        // SAFETY: every part of `src` (forwarded contract); every peer's window for this rank
        // holds every unit.
        let own = unsafe {
            scatter_unit(
                &w,
                u,
                flag,
                |_| true,
                |q| load_unit(src.wrapping_add(at(q)), u, bytes),
            )
        };
        // SAFETY: this rank's part of `dst`, which does not overlap `src`.
        unsafe { store_unit(dst.wrapping_add(at(me)), u, bytes, own) };
        u += stride;
    }
    call.mark(Point::Sent);
    call.check_digests_early(warp_kept);
    let mut u = first;
    while u < units {
        // SAFETY: this rank's window for every peer holds the peer's units; `own` stands for
        // this rank's part (already stored).
        unsafe {
            gather_unit(call, &w, u, flag, Some(0), |p, v| {
                if p != me {
                    // SAFETY: part p of `dst`.
                    store_unit(dst.wrapping_add(at(p)), u, bytes, v)
                }
            })?
        };
        u += stride;
    }
    call.mark(Point::Received);
    Ok(())
}

/// AllToAllV over packets, one trip, as [`packets`] with ragged parts: a unit is sent or read
/// only where its part holds it. (The fixed form keeps its own path: through this one it ran
/// 0.6 us slower at 8 ranks on the H200.)
///
/// # Safety
/// As [`all_to_all_v`], the layouts describing the call's buffers, the counts validated (what
/// this rank sends itself is what it receives from itself); every part fits a latency window;
/// every thread of every block of the call runs it with the same values.
#[inline(never)]
unsafe fn packets_v<S: Layout, D: Layout>(
    call: &Call,
    (dst, dst_parts): (*mut u8, D),
    (src, src_parts): (*const u8, S),
    blocks: u32,
) -> Result<(), Left> {
    let (me, world) = (call.me(), call.world());
    let flag = packet::flag32(call.epoch);
    let w = Windows::of(call);
    let sent = |q: u32| {
        let (at, len) = src_parts.part(me, q);
        (src.wrapping_add(at as usize), len)
    };
    let received = |p: u32| {
        let (at, len) = dst_parts.part(me, p);
        (dst.wrapping_add(at as usize), len)
    };
    let most = units(
        src_parts
            .longest_part(me, world)
            .max(dst_parts.longest_part(me, world)),
    );
    let Lanes {
        first,
        stride,
        warp_kept,
    } = lanes(call, blocks, most);
    let mut u = first;
    while u < most {
        // SAFETY: every part of `src` (forwarded contract), read where `present` names its
        // unit u; every peer's window for this rank holds its part.
        let own = unsafe {
            scatter_unit(
                &w,
                u,
                flag,
                |q| u < units(sent(q).1),
                |q| {
                    let (at, len) = sent(q);
                    load_unit(at, u, len)
                },
            )
        };
        let (at, len) = received(me);
        if u < units(len) {
            // SAFETY: this rank's part of `dst`, which does not overlap `src`.
            unsafe { store_unit(at, u, len, own) };
        }
        u += stride;
    }
    call.mark(Point::Sent);
    call.check_digests_early(warp_kept);
    let mut u = first;
    while u < most {
        // SAFETY: this rank's window for every peer holds the part it receives from the peer,
        // whose units `present` names; this rank's own part is already stored.
        unsafe {
            gather_unit_of::<false, _>(
                call,
                &w,
                u,
                flag,
                None,
                |p| p != me && u < units(received(p).1),
                |p, v| {
                    let (at, len) = received(p);
                    // SAFETY: part p of `dst`.
                    store_unit(at, u, len, v)
                },
            )?
        };
        u += stride;
    }
    call.mark(Point::Received);
    Ok(())
}

/// # Safety
/// As [`all_to_all`].
unsafe fn exchange_with<A: Atom, C: Config, S: Layout, D: Layout, const K: u32>(
    c: &Checked<C, K>,
    src: S,
    dst: D,
    digest: &Digest,
    empty_call: bool,
) {
    let streams = Exchange {
        b: Buffers::of(c.args, c.ctx),
        src,
        dst,
    };
    // SAFETY: forwarded contract.
    unsafe { c.copy_streams::<A, _>(&streams, digest, empty_call) }
}
