//! Which regime a call runs: the latency regime's packets (a *lean* call, which needs no Atom
//! shared memory), or the throughput regime's staging or one pass. The host takes the same
//! decisions from the same arguments to shape its launch.

use super::CollectiveKind;
use super::all_reduce::all_reduce_algorithm;
use crate::snac::latency;
use crate::snac::{Plan, SnacArgs};

wire_enum! {
    /// Which algorithm a collective runs ([`Plan::algorithm`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub enum Algorithm {
        /// Chosen from the size: packets up to [`Plan::latency_threshold`] (AllReduce: one-shot
        /// or two-shot), the throughput regime above.
        #[default]
        Auto = 0 => "auto",
        /// AllReduce's latency regime: every rank sends its whole input as packets to every
        /// peer.
        OneShot = 1 => "one_shot",
        /// AllReduce's latency regime: reduce-scatter over packets, then all-gather the reduced
        /// shards.
        TwoShot = 2 => "two_shot",
        /// The throughput regime, for every collective: chunked staging (AllReduce: a
        /// ReduceScatter head and an AllGather tail for world > 2, direct for world 2), or one
        /// pass over symmetric buffers.
        Throughput = 3 => "throughput",
    }

    /// The algorithm with this `repr(u32)` value; unknown values mean `Auto`.
    pub const fn from_u32(v: u32) -> Self else Auto;

    /// The name in tuning tables (`one_shot`, ...).
    pub const fn name(self) -> &'static str;
}

impl Algorithm {
    /// The algorithm a plan asks for.
    ///
    /// ```
    /// use purlin_device::collective::Algorithm;
    /// use purlin_device::snac::Plan;
    /// let plan = Plan { algorithm: Algorithm::TwoShot as u32, ..Plan::DEFAULT };
    /// assert_eq!(Algorithm::of(&plan), Algorithm::TwoShot);
    /// ```
    pub const fn of(plan: &Plan) -> Self {
        Self::from_u32(plan.algorithm)
    }
}

/// Largest world-1 call (bytes per part) that runs through registers rather than the Atom.
pub const LEAN_LOCAL_MAX_BYTES: u64 = 256 << 10;

/// The bound on every stream of a call: the part size of a fixed-size collective, or the
/// largest count a V call may hold, in bytes (`u64::MAX` when unbounded). Every rank computes
/// the same value, from arguments the call digest compares.
///
/// ```
/// use purlin_device::collective::{CollectiveKind, stream_bound};
/// use purlin_device::snac::SnacArgs;
/// let args = SnacArgs::new(core::ptr::null_mut(), core::ptr::null(), 4096, 1);
/// assert_eq!(stream_bound(CollectiveKind::AllGather, &args), 4096);
/// let mut v = args.bounded(1 << 20, 1 << 20, 100);
/// v.elem_bytes = 2;
/// assert_eq!(stream_bound(CollectiveKind::AllToAllV, &v), 200);
/// ```
pub const fn stream_bound(kind: CollectiveKind, args: &SnacArgs) -> u64 {
    if kind.is_v() {
        args.max_count.saturating_mul(args.elem_bytes as u64)
    } else {
        args.bytes
    }
}

/// Whether a call whose streams are at most `bound` bytes (see [`stream_bound`]) runs a path
/// that needs no Atom shared memory, so it may be launched with only
/// [`SNAC_SMEM_BYTES`](crate::snac::SNAC_SMEM_BYTES): at world 1 a register copy up to
/// [`LEAN_LOCAL_MAX_BYTES`]; AllReduce's one-/two-shot packets; the other collectives' packets
/// when every stream fits a latency window of `window` bytes and `bound × world` is within the
/// plan's `latency_threshold` (a forced `Throughput` algorithm never). The host launches such a
/// call lean and the device takes the same decision from the same arguments.
///
/// ```
/// use purlin_device::collective::{CollectiveKind, lean};
/// use purlin_device::snac::Plan;
/// let plan = Plan::default();
/// assert!(lean(CollectiveKind::AllGather, 8, 4096, &plan, 4 << 20));
/// assert!(!lean(CollectiveKind::AllGather, 8, 1 << 20, &plan, 4 << 20));
/// assert!(lean(CollectiveKind::AllReduce, 8, 16, &plan, 4 << 20));
/// assert!(!lean(CollectiveKind::AllToAllV, 8, u64::MAX, &plan, 4 << 20));
/// ```
pub const fn lean(kind: CollectiveKind, world: u32, bound: u64, plan: &Plan, window: u64) -> bool {
    if world <= 1 {
        return bound <= LEAN_LOCAL_MAX_BYTES;
    }
    match kind {
        CollectiveKind::AllReduce => !matches!(
            all_reduce_algorithm(plan, bound, world, window),
            Algorithm::Throughput
        ),
        _ => {
            !matches!(Algorithm::of(plan), Algorithm::Throughput)
                && window % 32 == 0
                && bound <= window
                && latency::one_shot_fits(bound, window)
                && bound.saturating_mul(world as u64) <= plan.latency_threshold
        }
    }
}

/// Blocks for a lean call of `threads`-thread blocks (at most `max`): about two units of work
/// per thread, at least one block.
///
/// ```
/// use purlin_device::collective::lean_blocks;
/// assert_eq!(lean_blocks(8, 16, 256, 32), 1);
/// assert_eq!(lean_blocks(8, 32 << 10, 256, 32), 32);
/// ```
pub const fn lean_blocks(world: u32, bound: u64, threads: u32, max: u32) -> u32 {
    let work = latency::units(bound).saturating_mul(world as u64);
    let per_block = if threads == 0 { 2 } else { threads as u64 * 2 };
    let blocks = work.div_ceil(per_block);
    if blocks < 1 {
        1
    } else if blocks > max as u64 {
        if max == 0 { 1 } else { max }
    } else {
        blocks as u32
    }
}
