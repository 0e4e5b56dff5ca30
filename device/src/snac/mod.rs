//! SNAC: *where and when* data moves. Stage, Notify, And Consume.
//!
//! A collective kernel is a set of *streams*. A producer block set stages a stream from the
//! caller's `src` into this rank's own staging (a local copy), and the last producer to finish
//! a chunk notifies the stream's consumers with a monotonic flag. Consumer blocks on the
//! receiving rank wait for the flag and *pull* the chunk from the producer's staging over the
//! interconnect, copying it to `dst` or reducing it with the same chunk of every other rank.
//! This module knows nothing of which instructions move bytes (that is [`crate::atom`]) nor of
//! which collective runs (that is [`crate::collective`], which describes streams with
//! [`crate::layout`]s).
//!
//! The pieces:
//! - [`epoch`]: per-block epochs; the parity of an epoch selects one of two staging halves,
//!   every call advances it by an odd amount, and chunk flags are `epoch + chunk + 1`.
//! - signals (module `sync`): posted with `st.release.sys`, awaited with relaxed polling and
//!   one acquire load; every wait is bounded by [`Context::timeout_ns`] and a timed-out wait
//!   leaves a [`FaultRecord`] in the rank's local state.
//! - last-arrival counters: the last block of a set to finish a chunk posts its flag.
//! - [`packet`]: 16-byte latency packets (8-byte payload + flag written together), used by
//!   the latency regime and by the size agreement of the V collectives.
//! - staging (module `staging`): resident and cyclic staging; in cyclic mode a producer waits
//!   for the *consumed* signal of the slot it is about to reuse.
//! - [`symmetric`]: the symmetric regime, one pass over the peers' own buffers when a call's
//!   buffers are symmetric (no staging; a meeting at entry and one at exit).
//!
//! [`Context::timeout_ns`]: crate::context::Context::timeout_ns
//!
//! # Consecutive calls
//!
//! Calls on one communicator follow each other on every rank's stream with nothing between
//! them: a fast rank may be in call `c + 1` while a slow one is still in call `c`, and kinds,
//! sizes, regimes, block counts and plans change from call to call. One rule makes that safe:
//!
//! **Every block of every rank starts call `c` at the same epoch `e_c`, every flag the call
//! posts lies in `e_c + 1 ..= e_{c+1}`, and no rank can finish call `c + 1` before every peer
//! has started it.**
//!
//! Why each part holds, for any pair of consecutive calls:
//! - *Same epoch.* A call ends with every block advancing its epoch slot by the same agreed
//!   amount: `rounds | 1` in the throughput regime, where `rounds` comes from sizes every rank
//!   knows (the streams' agreed length) or is exchanged in-kernel (the V collectives'
//!   extent packets), and 1 in the latency regime. Block 0 also advances the slots
//!   `blocks..coll_blocks` that no block of the call owns, so a later call with more blocks
//!   reads the same epoch in every slot. Calls that move nothing (0 bytes, all V counts 0,
//!   world 1) touch no epoch, signal or staging on any rank, since every rank sees the same
//!   sizes. The next call's blocks read memory only when all of this call's blocks finished
//!   (stream order; a next call launched early, [`Plan::launch_dependents`], waits for that in
//!   `collective::check` before its first read), so they read the advanced slots.
//! - *Flags never mistaken.* Signals are monotonic and awaited with `>=`. A waiter of call
//!   `c + 1` waits for at least `e_{c+1} + 1`, more than any flag of call `c`; a waiter of call
//!   `c` that sees a flag of call `c + 1` knows the sender finished call `c`, so the flag it
//!   wanted was posted before (each stream's flags are posted in order). Latency packets carry
//!   [`packet::flag32`] of the epoch, different for every call whose packets share a half.
//! - *Memory not reused too early.* Call `c` stages into half `e_c & 1` (throughput staging,
//!   latency windows and extent packets alike); consecutive epochs differ in parity, so call
//!   `c + 1` writes the other half, and only call `c + 2` writes this one again. Every call
//!   makes every rank wait for something each peer posts in that call (a data flag even for an
//!   empty stream, the packets of every unit from every peer, every rank's extent), and a peer
//!   posts only once its blocks started the call, that is after all of its blocks finished
//!   the call before. So a rank that reaches call `c + 2` has seen every peer start `c + 1`,
//!   hence finish `c`: nothing a slow peer still reads of call `c` is overwritten. Within a
//!   call, cyclic slots are protected by *consumed* (or *gather*) flags as `staging`
//!   describes, and last-arrival counters are reset by their last arriver before the flag
//!   that lets anyone reuse them. The symmetric regime stages nothing; its callers' own
//!   buffers are protected by its exit meeting: no rank ends a call before every peer posted
//!   that it is done with them.
//!
//! `tests/cpu_sequences.rs` checks the rule on the CPU emulation with every rank running its
//! own queue of random calls (`emulation::Communicator::run_queued`), and `tests/gpu/queued.rs`
//! on the GPU.
//!
//! ```
//! use purlin_device::snac::{Plan, SnacArgs};
//! let plan = Plan::default();
//! assert_eq!(plan.chunk_bytes % 16, 0);
//! let args = SnacArgs::new(core::ptr::null_mut(), core::ptr::null(), 0, 2);
//! assert_eq!((args.blocks, args.block), (2, 0));
//! ```

pub mod assign;
pub mod digest;
pub mod epoch;
mod fault;
pub(crate) mod latency;
pub mod packet;
pub(crate) mod staging;
pub mod symmetric;
pub(crate) mod sync;
pub mod trace;
pub(crate) mod transfer;
pub mod window;

pub use fault::{CallKind, Cause, DigestField, FaultKind, FaultRecord, Refusal, SignalKind};
pub use symmetric::PeersReach;

use crate::atom::Atom;

/// Bytes of shared memory SNAC needs for itself, after the Atom's: block-wide broadcast words,
/// the call's epoch and digest, the V collectives' validated counts and their parts' starts
/// (`2 × MAX_RANKS` each), and every rank's `src` and `dst` addresses when the ranks reach each
/// other's ordinary buffers (`MAX_RANKS` each).
pub const SNAC_SMEM_BYTES: u32 =
    SCRATCH_ADDRESSES as u32 + 2 * crate::context::MAX_RANKS as u32 * 8;

/// Where in SNAC's scratch the call digest lies (bytes).
pub(crate) const SCRATCH_DIGEST: usize = 16;
/// Where in SNAC's scratch the validated V counts lie (bytes).
pub(crate) const SCRATCH_COUNTS: usize = 64;
/// Where in SNAC's scratch the V parts' starts lie (bytes; the sums of the counts before each).
pub(crate) const SCRATCH_STARTS: usize = SCRATCH_COUNTS + 2 * crate::context::MAX_RANKS * 8;
/// Where in SNAC's scratch the ranks' exchanged buffer addresses lie (bytes): every rank's
/// `src`, then every rank's `dst`. Before a V call begins, its counts' digest shares.
pub(crate) const SCRATCH_ADDRESSES: usize = SCRATCH_STARTS + 2 * crate::context::MAX_RANKS * 8;

/// Dynamic shared memory a collective kernel with Atom `A` needs per block: the Atom's
/// pipeline, then SNAC's scratch words (block-wide broadcasts).
///
/// ```
/// use purlin_device::atom::{Atom, Sm80};
/// use purlin_device::snac::{smem_bytes, SNAC_SMEM_BYTES};
/// assert!(smem_bytes::<Sm80>() >= Sm80::SMEM_BYTES + SNAC_SMEM_BYTES);
/// ```
pub const fn smem_bytes<A: Atom>() -> u32 {
    scratch_offset::<A>() + SNAC_SMEM_BYTES
}

/// Where SNAC's scratch starts in the block's shared memory (after the Atom's, 16-aligned).
pub(crate) const fn scratch_offset<A: Atom>() -> u32 {
    A::SMEM_BYTES.div_ceil(16) * 16
}

wire_enum! {
    /// How reductions may combine values.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub enum ReductionMode {
        /// The fastest datapath available. Today that is the deterministic one on every
        /// architecture (there is no unordered datapath yet), so results are the same.
        #[default]
        Default = 0,
        /// Bitwise identical results across runs, block counts, chunk sizes, regimes and fused or
        /// host-launched calls: every element is accumulated in `f32` over ranks `0..world` in
        /// order and rounded to the element type once.
        Deterministic = 1,
    }
}

/// The tuning knobs of one call, chosen by the host (from `purlin-tuning` tables) or fixed by
/// a fused kernel. Plain data, the same bytes on host and device.
///
/// Every rank of a call must use the same plan and the same number of blocks: regimes, chunk
/// counts and epochs are derived from them and must agree across ranks.
///
/// ```
/// use purlin_device::snac::Plan;
/// let plan = Plan { chunk_bytes: 256 << 10, ..Plan::default() };
/// assert_eq!(plan.latency_threshold, 512 << 10);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Plan {
    /// Threads per block the host launches with (informational on the device: the kernel uses
    /// the block size it was launched with).
    pub threads: u32,
    /// Producer (staging) blocks in the throughput regime; the remaining blocks consume.
    /// Clamped to `1..blocks`.
    pub put_blocks: u32,
    /// Chunk size of the throughput regime, bytes (rounded down to a multiple of 16, and to
    /// what the staging half can hold).
    pub chunk_bytes: u64,
    /// Payloads up to this many bytes (a collective's whole payload, summed over ranks where
    /// the collective says so) may use the latency regime (packets).
    pub latency_threshold: u64,
    /// The collectives' latency regime: payloads of at least this many bytes use two-shot
    /// where a collective has it (if `world >= two_shot_min_world`), smaller ones one-shot.
    pub two_shot_min_bytes: u64,
    /// The smallest world that uses two-shot.
    pub two_shot_min_world: u32,
    /// Which algorithm the collective runs: its own code (the collectives':
    /// `collective::Algorithm`), compared by the call digest and not read by SNAC.
    pub algorithm: u32,
    /// Reduction mode (as [`ReductionMode`]).
    pub mode: u32,
    /// Nonzero: block 0's thread 0 writes the time (`%globaltimer`, ns) at each phase of the
    /// call into the rank's local state ([`trace::Point`]), so a host can see where a call's
    /// time goes (`purlin::Context::last_call_trace`). Zero (the default) costs one untaken
    /// branch per phase.
    pub trace: u32,
    /// Nonzero: once the call has waited for the work before it on its stream, it lets the
    /// next launch on that stream, if launched as a programmatic dependent (sm_90 and later),
    /// be scheduled, so that launch's start overlaps this call ([`Atom::launch_dependents`]).
    /// Each rank decides for itself (not compared between ranks). The host sets it only
    /// where both launches' blocks fit the GPU beside every other rank's; zero (the default)
    /// leaves the next launch to start after this one ends. A kernel of yours that runs a
    /// collective with it set lets its own programmatic dependents start from there.
    ///
    /// [`Atom::launch_dependents`]: crate::atom::Atom::launch_dependents
    pub launch_dependents: u32,
}

impl Plan {
    /// Defaults from the original's codesign base policy: 128 threads, 32 put blocks (clamped
    /// to the launch), 1 MiB chunks, 512 KiB latency threshold, two-shot from 64 KiB at
    /// world >= 4.
    pub const DEFAULT: Plan = Plan {
        threads: 128,
        put_blocks: 32,
        chunk_bytes: 1 << 20,
        latency_threshold: 512 << 10,
        two_shot_min_bytes: 64 << 10,
        two_shot_min_world: 4,
        algorithm: 0,
        mode: ReductionMode::Default as u32,
        trace: 0,
        launch_dependents: 0,
    };
}

impl Default for Plan {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Where a collective's plan comes from. Host-launched kernels use [`Runtime`] (the plan the
/// host put in [`SnacArgs::plan`]); a fused kernel may fix its plan at compile time so the
/// compiler folds it.
///
/// ```
/// use purlin_device::snac::{Config, Plan, Runtime};
/// struct SmallChunks;
/// impl Config for SmallChunks {
///     fn plan(_: &Plan) -> Plan { Plan { chunk_bytes: 64 << 10, ..Plan::DEFAULT } }
/// }
/// assert_eq!(SmallChunks::plan(&Plan::DEFAULT).chunk_bytes, 64 << 10);
/// assert_eq!(Runtime::plan(&Plan::DEFAULT), Plan::DEFAULT);
/// ```
pub trait Config {
    /// Compile only the paths that need no Atom shared memory (see
    /// [`lean`](crate::collective::lean)): a call that would need another is refused
    /// ([`Refusal::SharedMemory`]). A kernel of only the latency paths is a fraction of the
    /// code and registers of the whole collective, so it starts sooner.
    const LATENCY_ONLY: bool = false;

    /// The plan to run with, given the one in the arguments.
    fn plan(runtime: &Plan) -> Plan;
}

/// The plan the host passed in [`SnacArgs::plan`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Runtime;

impl Config for Runtime {
    #[inline(always)]
    fn plan(runtime: &Plan) -> Plan {
        *runtime
    }
}

/// [`Runtime`]'s plan, compiled for the latency paths only ([`Config::LATENCY_ONLY`]): what
/// the host launches for a lean call.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency;

impl Config for Latency {
    const LATENCY_ONLY: bool = true;

    #[inline(always)]
    fn plan(runtime: &Plan) -> Plan {
        *runtime
    }
}

/// The arguments of one collective call on one block. Plain data (`#[repr(C)]`), so a
/// host-launched kernel takes it as a parameter.
///
/// Sizes: `bytes` is per rank and per part, as the collective defines it (AllGather: each
/// rank's input; ReduceScatter: each rank's output; AllToAll: each part sent to one peer;
/// AllReduce: the whole buffer). For reductions it is `count × size_of::<T>()`. The V
/// collectives ignore `bytes` and read their element counts from `counts` (device memory, so
/// a CUDA graph can be replayed with new counts), elements of `elem_bytes` bytes.
///
/// Exactly `blocks` blocks enter the collective, each with its own `block` index in
/// `0..blocks`, all with the same number of threads. `smem` points to
/// [`smem_bytes::<A>()`](smem_bytes) bytes of this block's shared memory. Epoch slots
/// `blocks..coll_blocks` are advanced too (by block 0), so a later call with more blocks reads
/// a current epoch: pass [`MAX_BLOCKS`](crate::context::MAX_BLOCKS) unless you know better.
///
/// ```
/// use purlin_device::snac::SnacArgs;
/// let mut args = SnacArgs::new(core::ptr::null_mut(), core::ptr::null(), 1024, 4);
/// args.block = 3;
/// assert_eq!(args.coll_blocks, purlin_device::context::MAX_BLOCKS as u32);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct SnacArgs {
    /// Output buffer of this rank.
    pub dst: *mut u8,
    /// Input buffer of this rank.
    pub src: *const u8,
    /// Bytes per rank and part (see above); unused by V collectives.
    pub bytes: u64,
    /// V collectives: element counts in device memory (AllGatherV and ReduceScatterV: `world`
    /// counts, one per rank; AllToAllV: `2 × world`, the counts this rank sends to each peer
    /// then the counts it receives from each peer).
    pub counts: *const u64,
    /// V collectives: bytes per element.
    pub elem_bytes: u32,
    /// Blocks entering the collective.
    pub blocks: u32,
    /// Epoch slots kept current (`blocks..coll_blocks` are advanced by block 0).
    pub coll_blocks: u32,
    /// This block's index in `0..blocks`.
    pub block: u32,
    /// This block's shared memory for the Atom and SNAC.
    pub smem: *mut u8,
    /// Bytes at `smem`: 0 means [`smem_bytes`]`::<A>()` (the full layout, the fused kernels'
    /// contract); the host-launched kernels fill in what the launch gave. A *lean* launch
    /// ([`SNAC_SMEM_BYTES`] only, see [`crate::collective::lean`]) runs only the paths that
    /// need no Atom shared memory; any other path is refused.
    pub smem_bytes: u32,
    /// The tuning knobs (see [`Config`]).
    pub plan: Plan,
    /// Bytes the caller's `src` holds (`u64::MAX`: unknown, the caller vouches for the sizes).
    /// V collectives refuse counts that need more.
    pub src_bytes: u64,
    /// Bytes the caller's `dst` holds (`u64::MAX`: unknown).
    pub dst_bytes: u64,
    /// V collectives: the largest count any entry may hold, the same on every rank
    /// (`u64::MAX`: no bound). Larger counts are refused.
    pub max_count: u64,
    /// Symmetric buffers (allocated on every rank and mapped in every peer, as the host's
    /// `SymmetricBuffer`): the start of every rank's copy of the buffer `src` lies in, as this
    /// rank addresses them — `world` addresses in memory the kernel can read, entry `rank`
    /// being this rank's own — or null for an ordinary buffer. `src` may lie anywhere in its
    /// buffer, at the same offset on every rank. With symmetric buffers the fixed-size
    /// collectives above the packet paths run one pass over the peers' buffers instead of
    /// staging (see [`symmetric`]).
    pub src_peers: *const u64,
    /// As `src_peers`, for `dst`: AllReduce needs both, an AllGather in place `dst`, the others
    /// read only the peers' `src`.
    pub dst_peers: *const u64,
    /// What names the symmetric buffers alike on every rank (0: ordinary buffers), compared by
    /// the call digest: no rank reads or writes a peer's buffer that the peer did not pass.
    pub buffers: u64,
    /// Whether the peers can reach this call's ordinary buffers (ranks of one process): a call
    /// above the packet paths whose buffers are not symmetric then exchanges its buffers'
    /// addresses at entry and runs one pass over them like symmetric buffers (see
    /// [`PeersReach`]). Every rank of a call passes [`PeersReach::None`] or none does (the
    /// digest compares it). [`PeersReach::Reachable`] is part of the entry points' contract:
    /// every peer's kernels can read and write this rank's `src` and `dst` at these addresses
    /// (ranks of one process on one GPU; the host sets it only there).
    pub peers_reach: PeersReach,
    /// V collectives over ordinary buffers the peers reach: the fewest bytes a rank moves
    /// (AllGatherV and ReduceScatterV: every count's bytes, the same on every rank;
    /// AllToAllV: `max_count × world` elements' bytes, the bound on what a rank sends) at
    /// which the call takes the one pass over the peers' buffers rather than staging; 0
    /// takes it at every size. The fixed-size forms ignore it (the host decides for them).
    /// Every rank passes the same: ranks that decide differently fault on the digest.
    pub direct_min_bytes: u64,
}

// SAFETY: plain addresses and sizes; the collective's contract says who may touch the memory.
unsafe impl Send for SnacArgs {}
// SAFETY: as above.
unsafe impl Sync for SnacArgs {}

impl SnacArgs {
    /// Arguments for block 0 of `blocks`, default plan, no counts, no shared memory yet.
    pub const fn new(dst: *mut u8, src: *const u8, bytes: u64, blocks: u32) -> Self {
        Self {
            dst,
            src,
            bytes,
            counts: core::ptr::null(),
            elem_bytes: 1,
            blocks,
            coll_blocks: crate::context::MAX_BLOCKS as u32,
            block: 0,
            smem: core::ptr::null_mut(),
            smem_bytes: 0,
            plan: Plan::DEFAULT,
            src_bytes: u64::MAX,
            dst_bytes: u64::MAX,
            max_count: u64::MAX,
            src_peers: core::ptr::null(),
            dst_peers: core::ptr::null(),
            buffers: 0,
            peers_reach: PeersReach::None,
            direct_min_bytes: 0,
        }
    }

    /// With the capacities of the caller's buffers (bytes), which the V collectives check their
    /// counts against, and the largest count any entry may hold.
    ///
    /// ```
    /// use purlin_device::snac::SnacArgs;
    /// let args = SnacArgs::new(core::ptr::null_mut(), core::ptr::null(), 0, 1).bounded(64, 256, 16);
    /// assert_eq!((args.src_bytes, args.dst_bytes, args.max_count), (64, 256, 16));
    /// ```
    pub const fn bounded(mut self, src_bytes: u64, dst_bytes: u64, max_count: u64) -> Self {
        self.src_bytes = src_bytes;
        self.dst_bytes = dst_bytes;
        self.max_count = max_count;
        self
    }
}
