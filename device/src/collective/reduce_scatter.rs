//! ReduceScatter and ReduceScatterV: scattered → packed, reduced.

use super::CollectiveKind;
use super::entry::{Checked, Identity, check};
use super::kind::{Extent, InPlace, Semantics};
use super::streams::{Buffers, Scatter};
use crate::atom::Atom;
use crate::context::Context;
use crate::element::Element;
use crate::layout::{Layout, Scattered, ScatteredV};
use crate::op::{ReduceOp, ReduceOpKind};
use crate::snac::digest::Digest;
use crate::snac::latency::{
    Lanes, Windows, gather_unit, lanes, load_unit, scatter_unit, store_unit, units,
};
use crate::snac::packet;
use crate::snac::symmetric::PeerAccess;
use crate::snac::sync::{Call, Left};
use crate::snac::trace::Point;
use crate::snac::transfer::{Operator, Reducer, Static, Typed, by_op};
use crate::snac::{Config, SnacArgs};

/// ReduceScatter: `src` holds every rank's part, `dst` this rank's, which may be its part of
/// `src`; over symmetric inputs each rank reduces its part of every rank's.
pub(crate) const REDUCE_SCATTER: Semantics = Semantics {
    counts_per_rank: 0,
    src: Extent::All,
    dst: Extent::Own,
    in_place: InPlace::OutputIsOwnPart,
    peers: PeerAccess::ReadMaybeWrite,
};

/// ReduceScatterV: as [`REDUCE_SCATTER`], one count per rank.
pub(crate) const REDUCE_SCATTER_V: Semantics = Semantics {
    counts_per_rank: 1,
    ..REDUCE_SCATTER
};

reduction_entry_points! {
    /// ReduceScatter: rank `r`'s `dst` (`args.bytes` bytes) is the reduction over all ranks of
    /// part `r` of their `src` (`world × args.bytes` bytes). `dst` may be part `r` of `src`.
    ///
    /// # Safety
    /// As [`all_reduce`](super::all_reduce), with `src` valid for `world × args.bytes` bytes.
    pub unsafe fn reduce_scatter;

    /// [`reduce_scatter`] with the operator chosen at run time (see
    /// [`all_reduce_op`](super::all_reduce_op)).
    ///
    /// # Safety
    /// As [`reduce_scatter`].
    pub unsafe fn reduce_scatter_op;

    => reduce_scatter_with, { CollectiveKind::ReduceScatter as u32 }
}

reduction_entry_points! {
    /// ReduceScatterV: as [`reduce_scatter`] with parts of `counts[q]` elements (`world` counts in
    /// memory at `args.counts`, the same on every rank); `src` holds them all in rank order.
    ///
    /// # Safety
    /// As [`reduce_scatter`]; `args.counts` valid for `world` values while the call runs.
    pub unsafe fn reduce_scatter_v;

    /// [`reduce_scatter_v`] with the operator chosen at run time (see
    /// [`all_reduce_op`](super::all_reduce_op)).
    ///
    /// # Safety
    /// As [`reduce_scatter_v`].
    pub unsafe fn reduce_scatter_v_op;

    => reduce_scatter_with, { CollectiveKind::ReduceScatterV as u32 }
}

/// # Safety
/// As [`reduce_scatter`] (`K`: ReduceScatter) or [`reduce_scatter_v`] (ReduceScatterV).
#[inline(never)]
unsafe fn reduce_scatter_with<A: Atom, C: Config, T: Element, P: Operator, const K: u32>(
    args: &SnacArgs,
    ctx: &Context,
    op: P,
) {
    let size = core::mem::size_of::<T>() as u64;
    // The V counts are elements of T, whatever the caller put in `elem_bytes` (the host puts
    // the type's size): the lean decision's stream bound must be in bytes of T.
    let args = &SnacArgs {
        elem_bytes: size as u32,
        ..*args
    };
    let Some(mut c) = check::<A, C, K>(args, ctx, size) else {
        return;
    };
    let reducer = Typed::<T, P>::new(op);
    let id = Identity::reduction::<T, P>(op);
    if Checked::<C, K>::KIND.is_v() {
        // SAFETY: forwarded contract (`world` counts).
        let Some(v) = (unsafe { c.validated_counts::<A>(size) }) else {
            return;
        };
        let layout = ScatteredV {
            counts: v.counts,
            starts: v.starts,
            elem_bytes: size as u32,
        };
        let digest = id.digest(&c, args.max_count, v.word);
        if ctx.world > 1 && layout.max_part(ctx.world) != Some(0) && c.lean() {
            // SAFETY: forwarded contract; every part fits a window (`lean`: no count is above
            // `max_count`).
            return unsafe { packets_with::<A, C, T, P, _, K>(&c, layout, op, &digest) };
        }
        // SAFETY: forwarded contract.
        unsafe { scatter::<A, C, _, _, _>(&c, layout, reducer, &digest) }
    } else {
        let layout = Scattered { bytes: args.bytes };
        let digest = id.digest(&c, args.bytes, 0);
        if ctx.world > 1 && args.bytes > 0 && c.lean() {
            // SAFETY: forwarded contract; every part fits a window (`lean`).
            return unsafe { packets_with::<A, C, T, P, _, K>(&c, layout, op, &digest) };
        }
        // SAFETY: forwarded contract.
        unsafe { scatter::<A, C, _, _, _>(&c, layout, reducer, &digest) }
    }
}

/// Runs [`packets`] with the operator chosen once, as AllReduce's packet paths do, so that each
/// operator's path is one stretch of code.
///
/// # Safety
/// As [`packets`].
#[inline(always)]
unsafe fn packets_with<A: Atom, C: Config, T: Element, P: Operator, S: Layout, const K: u32>(
    c: &Checked<C, K>,
    src_parts: S,
    op: P,
    digest: &Digest,
) {
    let (dst, src, blocks) = (c.args.dst, c.args.src, c.args.blocks);
    // SAFETY: forwarded contract.
    unsafe {
        c.packets::<A>(digest, |call| {
            by_op!(op.kind(), O => {
                packets(call, dst, (src, src_parts), blocks, Typed::<T, Static<O>>::new(Static::NEW))
            })
        })
    }
}

/// ReduceScatter(V) over packets, one trip: each thread sends its units of part `q` of `src` to
/// rank `q`, then reduces the same units of this rank's part over every rank, in rank order
/// (its own from `src`), into `dst`.
///
/// # Safety
/// As [`reduce_scatter`] or [`reduce_scatter_v`], `src_parts` describing `src`; every part fits
/// a latency window; every thread of every block of the call runs it with the same values.
#[inline(never)]
unsafe fn packets<S: Layout, R: Reducer>(
    call: &Call,
    dst: *mut u8,
    (src, src_parts): (*const u8, S),
    blocks: u32,
    reducer: R,
) -> Result<(), Left> {
    let (me, world) = (call.me(), call.world());
    let flag = packet::flag32(call.epoch);
    let w = Windows::of(call);
    let part = |q: u32| {
        let (at, len) = src_parts.part(me, q);
        (src.wrapping_add(at as usize), len)
    };
    let most = units(src_parts.longest_part(me, world));
    let Lanes {
        first,
        stride,
        warp_kept,
    } = lanes(call, blocks, most);
    let mut u = first;
    while u < most {
        // SAFETY: every part of `src` (forwarded contract), read where `present` names its
        // unit u; every peer's window for this rank holds its part. This rank's unit is loaded
        // when reduced: keeping it would hold a register per unit across the wait.
        let _ = unsafe {
            scatter_unit(
                &w,
                u,
                flag,
                |q| q != me && u < units(part(q).1),
                |q| {
                    let (at, len) = part(q);
                    load_unit(at, u, len)
                },
            )
        };
        u += stride;
    }
    call.mark(Point::Sent);
    call.check_digests_early(warp_kept);
    let (own, len) = part(me);
    let mut u = first;
    while u < units(len) {
        let mut acc = R::Acc::default();
        // SAFETY: this rank's part of `src` (which `dst` may be: the same thread reads unit u
        // before it writes it); this rank's window for every peer holds the peer's units.
        unsafe {
            let v = load_unit(own, u, len);
            gather_unit(call, &w, u, flag, Some(v), |p, v| {
                reducer.fold_unit(&mut acc, p == 0, v)
            })?;
            store_unit(dst, u, len, reducer.unit_of(acc));
        }
        u += stride;
    }
    call.mark(Point::Received);
    Ok(())
}

/// # Safety
/// As [`reduce_scatter`].
#[inline(always)]
unsafe fn scatter<A: Atom, C: Config, L: Layout, R: Reducer, const K: u32>(
    c: &Checked<C, K>,
    layout: L,
    reducer: R,
    digest: &Digest,
) {
    let (args, ctx) = (c.args, c.ctx);
    if ctx.world == 1 {
        let (offset, len) = layout.part(0, 0);
        // SAFETY: forwarded contract.
        return unsafe {
            c.local_reduce::<A, R>(reducer, args.dst, args.src.add(offset as usize), len)
        };
    }
    if layout.max_part(ctx.world) == Some(0) {
        // SAFETY: forwarded contract.
        return unsafe { c.empty::<A>(digest) };
    }
    let streams = Scatter {
        b: Buffers::of(args, ctx),
        src: layout,
    };
    // SAFETY: forwarded contract.
    unsafe { c.staged::<A, _, R>(&streams, reducer, digest) }
}
