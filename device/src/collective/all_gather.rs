//! AllGather and AllGatherV: packed → scattered, copied.

use super::CollectiveKind;
use super::entry::{Checked, Identity, check};
use super::kind::{Extent, InPlace, Semantics};
use super::streams::{Buffers, Gather};
use crate::atom::Atom;
use crate::context::Context;
use crate::layout::{Layout, Packed, PackedV, Scattered, ScatteredV};
use crate::snac::digest::Digest;
use crate::snac::latency::{
    Lanes, Windows, gather_unit, gather_unit_of, lanes, load_unit, put_to_peers, store_unit, units,
};
use crate::snac::packet;
use crate::snac::symmetric::PeerAccess;
use crate::snac::sync::{Call, Left};
use crate::snac::trace::Point;
use crate::snac::{Config, SnacArgs};

/// AllGather: `src` holds this rank's part, `dst` every rank's, and `src` may be this rank's
/// part of `dst`; over symmetric outputs each rank pushes its part into every rank's, else over
/// symmetric inputs each pulls every rank's.
pub(crate) const ALL_GATHER: Semantics = Semantics {
    counts_per_rank: 0,
    src: Extent::Own,
    dst: Extent::All,
    in_place: InPlace::InputIsOwnPart,
    peers: PeerAccess::WriteElseRead,
};

/// AllGatherV: as [`ALL_GATHER`], one count per rank.
pub(crate) const ALL_GATHER_V: Semantics = Semantics {
    counts_per_rank: 1,
    ..ALL_GATHER
};

/// AllGather: part `p` of every rank's `dst` (`world × args.bytes` bytes) is rank `p`'s `src`
/// (`args.bytes` bytes). In place (`src` is part `r` of `dst` on rank `r`) is allowed.
///
/// # Safety
/// As [`all_reduce`](super::all_reduce), with the sizes above.
#[inline(always)]
pub unsafe fn all_gather<A: Atom, C: Config>(args: &SnacArgs, ctx: &Context) {
    let Some(c) = check::<A, C, { CollectiveKind::AllGather as u32 }>(args, ctx, 1) else {
        return;
    };
    let (src, dst) = (
        Packed { bytes: args.bytes },
        Scattered { bytes: args.bytes },
    );
    let digest = Identity::copy(1).digest(&c, args.bytes, 0);
    if ctx.world > 1 && args.bytes > 0 && c.lean() {
        let (dst, src, bytes, blocks) = (args.dst, args.src, args.bytes, args.blocks);
        // SAFETY: forwarded contract; every part fits a window (`lean`).
        return unsafe { c.packets::<A>(&digest, |call| packets(call, dst, src, bytes, blocks)) };
    }
    // SAFETY: forwarded contract.
    unsafe { gather_with::<A, C, _, _, _>(&c, src, dst, &digest) }
}

/// AllGather over packets, one trip: each thread sends its units of `src` to every peer and
/// stores them into this rank's part of `dst`, then copies the same units of every peer's part
/// from the windows here. In place (`src` is this rank's part) only the store is skipped.
///
/// # Safety
/// As [`all_gather`]; every part fits a latency window; every thread of every block of the
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
    let part = |p: u32| dst.wrapping_add((p as u64 * bytes) as usize);
    let own = part(me);
    let in_place = core::ptr::eq(own, src);
    let Lanes {
        first,
        stride,
        warp_kept,
    } = lanes(call, blocks, units);
    let mut u = first;
    while u < units {
        // SAFETY (both): forwarded contract; the windows hold every unit.
        let v = unsafe { load_unit(src, u, bytes) };
        unsafe { put_to_peers(&w, u, v, flag) };
        if !in_place {
            // SAFETY: this rank's part of `dst`.
            unsafe { store_unit(own, u, bytes, v) };
        }
        u += stride;
    }
    call.mark(Point::Sent);
    call.check_digests_early(warp_kept);
    let mut u = first;
    while u < units {
        // SAFETY: this rank's window for every peer holds the peer's units; `own` stands for
        // this rank's (already stored).
        unsafe {
            gather_unit(call, &w, u, flag, Some(0), |p, v| {
                if p != me {
                    // SAFETY: part p of `dst`.
                    store_unit(part(p), u, bytes, v)
                }
            })?
        };
        u += stride;
    }
    call.mark(Point::Received);
    Ok(())
}

/// AllGatherV over packets, one trip, as [`packets`] with ragged parts: a peer's unit is read
/// only where its part holds it. (The fixed form keeps its own path: through this one it ran
/// 0.6-0.7 us slower at 8 ranks on the H200.)
///
/// # Safety
/// As [`all_gather_v`], the layouts describing the call's buffers; every part fits a latency
/// window; every thread of every block of the call runs it with the same values.
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
    let own_len = src_parts.part(me, me).1;
    let part = |p: u32| {
        let (at, len) = dst_parts.part(me, p);
        (dst.wrapping_add(at as usize), len)
    };
    let own = part(me).0;
    let in_place = core::ptr::eq(own, src);
    let most = units(dst_parts.longest_part(me, world));
    let Lanes {
        first,
        stride,
        warp_kept,
    } = lanes(call, blocks, most);
    let mut u = first;
    while u < units(own_len) {
        // SAFETY (both): forwarded contract; the windows hold every unit.
        let v = unsafe { load_unit(src, u, own_len) };
        unsafe { put_to_peers(&w, u, v, flag) };
        if !in_place {
            // SAFETY: this rank's part of `dst`.
            unsafe { store_unit(own, u, own_len, v) };
        }
        u += stride;
    }
    call.mark(Point::Sent);
    call.check_digests_early(warp_kept);
    let mut u = first;
    while u < most {
        // SAFETY: this rank's window for every peer holds the peer's part, whose units
        // `present` names; this rank's own part is already stored.
        unsafe {
            gather_unit_of::<true, _>(
                call,
                &w,
                u,
                flag,
                None,
                |p| p != me && u < units(part(p).1),
                |p, v| {
                    let (at, len) = part(p);
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

/// AllGatherV: rank `p` contributes `counts[p]` elements of `args.elem_bytes` bytes (`world`
/// counts in memory at `args.counts`, the same on every rank); every `dst` holds all
/// contributions in rank order. Counts above `args.max_count`, or that need more than
/// `args.src_bytes` / `args.dst_bytes`, are refused before any byte moves.
///
/// # Safety
/// As [`all_gather`]; `args.counts` valid for `world` values while the call runs.
#[inline(always)]
pub unsafe fn all_gather_v<A: Atom, C: Config>(args: &SnacArgs, ctx: &Context) {
    let elem = args.elem_bytes as u64;
    let Some(mut c) = check::<A, C, { CollectiveKind::AllGatherV as u32 }>(args, ctx, elem) else {
        return;
    };
    // SAFETY: forwarded contract (`world` counts).
    let Some(v) = (unsafe { c.validated_counts::<A>(elem) }) else {
        return;
    };
    let src = PackedV {
        counts: v.counts,
        elem_bytes: args.elem_bytes,
    };
    let dst = ScatteredV {
        counts: v.counts,
        starts: v.starts,
        elem_bytes: args.elem_bytes,
    };
    let digest = Identity::copy(args.elem_bytes).digest(&c, args.max_count, v.word);
    if ctx.world > 1 && dst.max_part(ctx.world) != Some(0) && c.lean() {
        let (d, s, blocks) = (args.dst, args.src, args.blocks);
        // SAFETY: forwarded contract; every part fits a window (`lean`: no count is above
        // `max_count`).
        return unsafe {
            c.packets::<A>(&digest, |call| packets_v(call, (d, dst), (s, src), blocks))
        };
    }
    // SAFETY: forwarded contract.
    unsafe { gather_with::<A, C, _, _, _>(&c, src, dst, &digest) }
}

/// # Safety
/// As [`all_gather`].
unsafe fn gather_with<A: Atom, C: Config, S: Layout, D: Layout, const K: u32>(
    c: &Checked<C, K>,
    src: S,
    dst: D,
    digest: &Digest,
) {
    let empty_call = dst.max_part(c.ctx.world) == Some(0);
    let streams = Gather {
        b: Buffers::of(c.args, c.ctx),
        src,
        dst,
    };
    // SAFETY: forwarded contract.
    unsafe { c.copy_streams::<A, _>(&streams, digest, empty_call) }
}
