//! AllGather and AllGatherV: packed → scattered, copied.

use super::CollectiveKind;
use super::entry::{Checked, Identity, check};
use super::kind::{Extent, InPlace, Semantics};
use super::streams::{Buffers, Gather};
use crate::atom::Atom;
use crate::context::Context;
use crate::layout::{Layout, Packed, PackedV, Scattered, ScatteredV};
use crate::snac::digest::Digest;
use crate::snac::symmetric::PeerAccess;
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
    // SAFETY: forwarded contract.
    unsafe { gather_with::<A, C, _, _, _>(&c, src, dst, &digest) }
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
    let Some(c) = check::<A, C, { CollectiveKind::AllGatherV as u32 }>(args, ctx, elem) else {
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
