//! AllReduce: packed → packed, reduced. Small payloads run over packets (one-shot or
//! two-shot, [`packets`]); larger ones as a ReduceScatter head over [`Split`] shards composed
//! with an AllGather tail (direct at world 2), or one pass over symmetric buffers.

mod packets;

use super::CollectiveKind;
use super::entry::{Identity, check};
use super::kind::{Extent, InPlace, Semantics};
use super::regime::Algorithm;
use super::streams::{Buffers, Composed, Direct};
use crate::atom::Atom;
use crate::context::Context;
use crate::element::Element;
use crate::layout::Split;
use crate::op::{ReduceOp, ReduceOpKind};
use crate::snac::latency::one_shot_fits;
use crate::snac::symmetric::PeerAccess;
use crate::snac::transfer::{Operator, Static, Typed, by_op};
use crate::snac::{Config, Plan, SnacArgs};

/// AllReduce: both buffers hold the whole payload, and may be the same buffer; over symmetric
/// buffers each rank reduces its shard of every input into every output.
pub(crate) const ALL_REDUCE: Semantics = Semantics {
    counts_per_rank: 0,
    src: Extent::Own,
    dst: Extent::Own,
    in_place: InPlace::Same,
    peers: PeerAccess::ReadWrite,
};

/// The AllReduce algorithm a call of `bytes` bytes runs with `plan` on `world` ranks whose
/// latency windows hold `window` bytes: the plan's choice when it fits, else the throughput
/// regime; `Auto` picks one-shot, two-shot (from `two_shot_min_bytes` at
/// `two_shot_min_world` ranks) or throughput (above `latency_threshold`).
///
/// ```
/// use purlin_device::collective::{Algorithm, all_reduce_algorithm};
/// use purlin_device::snac::Plan;
/// let plan = Plan::default();
/// assert_eq!(all_reduce_algorithm(&plan, 4096, 8, 4 << 20), Algorithm::OneShot);
/// assert_eq!(all_reduce_algorithm(&plan, 128 << 10, 8, 4 << 20), Algorithm::TwoShot);
/// assert_eq!(all_reduce_algorithm(&plan, 1 << 20, 8, 4 << 20), Algorithm::Throughput);
/// ```
pub const fn all_reduce_algorithm(plan: &Plan, bytes: u64, world: u32, window: u64) -> Algorithm {
    let aligned = window % 32 == 0;
    let one = aligned && one_shot_fits(bytes, window);
    let two = aligned && world > 1 && packets::two_shot_fits(bytes, world as u64, window);
    match Algorithm::of(plan) {
        Algorithm::OneShot if one => Algorithm::OneShot,
        Algorithm::TwoShot if two => Algorithm::TwoShot,
        Algorithm::Auto if bytes <= plan.latency_threshold => {
            if two && world >= plan.two_shot_min_world && bytes >= plan.two_shot_min_bytes {
                Algorithm::TwoShot
            } else if one {
                Algorithm::OneShot
            } else if two {
                Algorithm::TwoShot
            } else {
                Algorithm::Throughput
            }
        }
        _ => Algorithm::Throughput,
    }
}

reduction_entry_points! {
    /// AllReduce: `dst = src₀ ⊕ src₁ ⊕ … ⊕ src_{world-1}` element-wise,
    /// `args.bytes / size_of::<T>()` elements on every rank. `src == dst` is allowed.
    ///
    /// # Safety
    /// `src` and `dst` are valid for `args.bytes` bytes on this rank, 16-byte aligned (else slower
    /// paths run); `ctx` describes the communicator's live buffers; see the module docs for who
    /// enters and what every rank must agree on.
    pub unsafe fn all_reduce;

    /// [`all_reduce`] with the operator chosen at run time: the collective is compiled once for
    /// `T`, and each reduction picks one of the four operators' datapaths with a `match` (static
    /// calls). This is what the host-launched kernels run, their operator being an argument.
    ///
    /// # Safety
    /// As [`all_reduce`].
    pub unsafe fn all_reduce_op;

    => all_reduce_with
}

/// # Safety
/// As [`all_reduce`].
#[inline(never)]
unsafe fn all_reduce_with<A: Atom, C: Config, T: Element, P: Operator>(
    args: &SnacArgs,
    ctx: &Context,
    op: P,
) {
    let size = core::mem::size_of::<T>() as u64;
    let Some(c) = check::<A, C, { CollectiveKind::AllReduce as u32 }>(args, ctx, size) else {
        return;
    };
    let bytes = args.bytes;
    let reducer = Typed::<T, P>::new(op);
    if ctx.world == 1 {
        // SAFETY: forwarded contract.
        return unsafe { c.local_reduce::<A, _>(reducer, args.dst, args.src, bytes) };
    }
    let digest = Identity::reduction::<T, P>(op)
        .with_algorithm(c.plan().algorithm)
        .digest(&c, bytes, 0);
    if bytes == 0 {
        // SAFETY: forwarded contract.
        return unsafe { c.empty::<A>(&digest) };
    }
    let algorithm = all_reduce_algorithm(&c.plan(), bytes, ctx.world, ctx.latency_window_bytes);
    let b = Buffers::of(args, ctx);
    match algorithm {
        Algorithm::OneShot | Algorithm::TwoShot => {
            let (dst, src, blocks) = (args.dst, args.src, args.blocks);
            // The operator is chosen once, here, rather than at each unit's fold, so each
            // operator's packet path is one stretch of code: 0.6-0.8 us less per small call at
            // 8 ranks on the H200 (`benches/RESULTS.md`); ReduceScatter's own packet path does
            // the same.
            // SAFETY (every arm): forwarded contract; the payload fits the windows (checked by
            // the choice).
            unsafe {
                c.packets::<A>(&digest, |call| {
                    by_op!(op.kind(), O => if algorithm == Algorithm::OneShot {
                        packets::one_shot::<T, Static<O>>(call, dst, src, bytes, blocks, Static::NEW)
                    } else {
                        packets::two_shot::<T, Static<O>>(call, dst, src, bytes, blocks, Static::NEW)
                    })
                })
            }
        }
        _ if ctx.world == 2 => {
            let streams = Direct { b, bytes };
            // SAFETY: forwarded contract.
            unsafe { c.staged::<A, _, _>(&streams, reducer, &digest) }
        }
        _ => {
            let streams = Composed {
                b,
                shards: Split {
                    bytes,
                    world: ctx.world,
                },
            };
            // SAFETY: forwarded contract.
            unsafe { c.staged::<A, _, _>(&streams, reducer, &digest) }
        }
    }
}
