//! AllToAll and AllToAllV: scattered → transposed, copied.

use super::CollectiveKind;
use super::entry::{Checked, Identity, check};
use super::kind::{Extent, InPlace, Semantics};
use super::streams::{Buffers, Exchange};
use crate::atom::Atom;
use crate::context::Context;
use crate::layout::{Layout, Scattered, ScatteredV, Transposed, TransposedV};
use crate::snac::digest::Digest;
use crate::snac::symmetric::PeerAccess;
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

/// AllToAllV: two counts per rank (sent to it, received from it); always staged, since a rank
/// cannot compute where its part lies in a peer's buffers.
pub(crate) const ALL_TO_ALL_V: Semantics = Semantics {
    counts_per_rank: 2,
    peers: PeerAccess::None,
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
    let Some(c) = check::<A, C, { CollectiveKind::AllToAllV as u32 }>(args, ctx, elem) else {
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
    // AllToAllV always runs the protocol: a rank with nothing to send or receive still agrees
    // on the size with the others.
    // SAFETY: forwarded contract.
    unsafe { exchange_with::<A, C, _, _, _>(&c, src, dst, &digest, false) }
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
