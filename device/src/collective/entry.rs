//! What every collective does around its own algorithm: check the arguments ([`check`] gives
//! a [`Checked`] call), name the call in its digest ([`Identity`]), validate V counts, and run
//! the paths every collective shares: world 1, a call that moves nothing, and the packet,
//! one-pass and staged regimes over a collective's streams.

use super::kind::{Extent, InPlace};
use super::regime::{lean, stream_bound};
use super::{CollectiveKind, Semantics};
use crate::atom::Atom;
use crate::context::{Context, MAX_BLOCKS, MAX_RANKS};
use crate::coop::Coop;
use crate::element::Element;
use crate::partition::split_bytes;
use crate::snac::digest::{self, Digest};
use crate::snac::latency;
use crate::snac::staging::{Engine, Get, Streams};
use crate::snac::symmetric::{self, OnePass, PeerAccess, PeersReach, Symmetric};
use crate::snac::sync::{Call, Left};
use crate::snac::trace;
use crate::snac::transfer::{self, NoReduce, Operator, Reducer};
use crate::snac::{
    Config, Plan, Refusal, SCRATCH_ADDRESSES, SCRATCH_COUNTS, SNAC_SMEM_BYTES, SnacArgs,
    scratch_offset, smem_bytes,
};
use core::marker::PhantomData;

/// A call of collective `K` (a [`CollectiveKind`] code) whose arguments passed [`check`]: what
/// every step of a collective needs. The collective is a constant, so that every step compiles
/// for it alone, whether inlined or not.
///
/// Two references (what the plan and the epoch slots are, it computes from them), so that the
/// steps that are not inlined take it in registers.
pub(super) struct Checked<'a, C, const K: u32> {
    /// The call's arguments (for a V reduction, with `elem_bytes` its type's size).
    pub(super) args: &'a SnacArgs,
    /// The communicator.
    pub(super) ctx: &'a Context,
    /// This block's epoch, loaded at entry by thread 0 (`Call::early_epoch`; 0 elsewhere).
    epoch: u64,
    /// What a V call moves, against `SnacArgs::direct_min_bytes` (set by `validated_counts`;
    /// 0 for the fixed-size forms, whose pass the host chose).
    moved: u64,
    config: PhantomData<C>,
}

impl<C, const K: u32> Clone for Checked<'_, C, K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<C, const K: u32> Copy for Checked<'_, C, K> {}

/// Checks what every collective needs; records the refusal and returns `None` if the call
/// cannot run.
///
/// `elem` is the element size: sizes must be whole elements (V collectives: not zero). The
/// checks read only the launch's parameters, so they run before the call waits for the work
/// before it on its stream ([`Atom::await_prior_grids`]); everything after this function may
/// read what that work wrote. Then, if the plan says so, the next launch may start
/// ([`Atom::launch_dependents`]): only after the wait, so at most two of a rank's calls hold
/// blocks at once.
#[inline(always)]
pub(super) fn check<'a, A: Atom, C: Config, const K: u32>(
    args: &'a SnacArgs,
    ctx: &'a Context,
    elem: u64,
) -> Option<Checked<'a, C, K>> {
    let kind = Checked::<C, K>::KIND;
    let threads = A::THREADS;
    let block_threads = crate::arch::block_threads();
    let refusal = if ctx.world == 0
        || ctx.world as usize > MAX_RANKS
        || ctx.rank >= ctx.world
        || args.blocks == 0
        || args.blocks as usize > MAX_BLOCKS
        || args.block >= args.blocks
    {
        Some(Refusal::Shape)
    } else if block_threads > threads {
        Some(Refusal::BlockThreads)
    } else if (1..SNAC_SMEM_BYTES).contains(&smem_available(args)) {
        Some(Refusal::SharedMemory)
    } else if kind.is_v() {
        if args.counts.is_null() {
            Some(Refusal::CountsMissing)
        } else if elem == 0 {
            Some(Refusal::Elements)
        } else {
            None
        }
    } else if !args.bytes.is_multiple_of(elem) {
        Some(Refusal::Elements)
    } else {
        fixed_capacity(args, ctx.world, ctx.rank, kind.semantics())
    };
    A::await_prior_grids();
    let epoch = match refusal {
        // SAFETY: a valid shape (`block < blocks <= MAX_BLOCKS`); the work before the call is
        // done (just above).
        None => unsafe { Call::early_epoch(ctx, args.block) },
        Some(_) => 0,
    };
    trace::mark(ctx, args.plan.trace != 0, args.block, trace::Point::Entry);
    if C::plan(&args.plan).launch_dependents != 0 {
        A::launch_dependents();
    }
    if let Some(why) = refusal {
        if ctx.state != 0 && crate::arch::thread_index() == 0 {
            let _ = Call::detached(ctx, kind.call(), args.block).refuse(
                why,
                0,
                threads as u64,
                block_threads as u64,
            );
        }
        return None;
    }
    Some(Checked {
        args,
        ctx,
        epoch,
        moved: 0,
        config: PhantomData,
    })
}

/// What [`Checked::validated_counts`] refuses among `n` counts (`w` per half), and why: the
/// first count in index order above `max_count`, or whose half's running sum passes 64 bits.
/// Run only when a thread found one.
///
/// # Safety
/// `counts` valid for `n` values.
#[cold]
#[inline(never)]
unsafe fn first_refusal(
    counts: *const u64,
    n: usize,
    w: usize,
    max_count: u64,
) -> Option<(Refusal, u32, u64, u64)> {
    let (mut sum_first, mut sum_last) = (0u64, 0u64);
    for i in 0..n {
        // SAFETY: the caller's contract.
        let c = unsafe { counts.add(i).read() };
        if c > max_count {
            return Some((Refusal::CountAboveMax, i as u32, max_count, c));
        }
        let sum = if i < w { &mut sum_first } else { &mut sum_last };
        match sum.checked_add(c) {
            Some(next) => *sum = next,
            None => return Some((Refusal::SizeOverflow, i as u32, u64::MAX, c)),
        }
    }
    None
}

/// Bytes of a buffer that holds `extent` of parts of `part` bytes, over `world` ranks (`None`
/// past 64 bits).
#[inline(always)]
const fn extent_bytes(extent: Extent, part: u64, world: u64) -> Option<u64> {
    match extent {
        Extent::Own => Some(part),
        Extent::All => part.checked_mul(world),
    }
}

/// A fixed-size collective's buffers against their capacities: `None` when they hold what the
/// call moves.
#[inline(always)]
fn fixed_capacity(args: &SnacArgs, world: u32, rank: u32, s: Semantics) -> Option<Refusal> {
    let (b, w) = (args.bytes, world as u64);
    let (Some(src), Some(dst)) = (extent_bytes(s.src, b, w), extent_bytes(s.dst, b, w)) else {
        return Some(Refusal::SizeOverflow);
    };
    if src > args.src_bytes {
        Some(Refusal::SourceTooSmall)
    } else if dst > args.dst_bytes {
        Some(Refusal::DestinationTooSmall)
    } else if !aliasing_allowed(args, s.in_place, src, dst, b.saturating_mul(rank as u64)) {
        Some(Refusal::Overlap)
    } else {
        None
    }
}

/// Whether `src` (`src_len` bytes used) and `dst` (`dst_len`) may share memory the way they do:
/// not at all, or as the collective's in-place form allows (`part` is this rank's part's
/// offset).
#[inline(always)]
fn aliasing_allowed(
    args: &SnacArgs,
    in_place: InPlace,
    src_len: u64,
    dst_len: u64,
    part: u64,
) -> bool {
    let (s, d) = (args.src as u64, args.dst as u64);
    let overlap = src_len > 0
        && dst_len > 0
        && s < d.saturating_add(dst_len)
        && d < s.saturating_add(src_len);
    if !overlap {
        return true;
    }
    match in_place {
        InPlace::Same => s == d,
        InPlace::InputIsOwnPart => d.checked_add(part) == Some(s),
        InPlace::OutputIsOwnPart => s.checked_add(part) == Some(d),
        InPlace::Never => false,
    }
}

/// Whether a call's `src` and `dst`, as far as their capacities go, share no byte (not its
/// in-place form).
#[inline(always)]
fn apart(args: &SnacArgs) -> bool {
    let (s, d) = (args.src as u64, args.dst as u64);
    s >= d.saturating_add(args.dst_bytes) || d >= s.saturating_add(args.src_bytes)
}

/// What the digest says of a call besides its collective and plan: its element and operator
/// codes and its algorithm.
#[derive(Clone, Copy)]
pub(super) struct Identity {
    element: u8,
    operator: u8,
    /// The plan's algorithm, for the collectives that read it apart from the regime
    /// (AllReduce); 0 for the others.
    algorithm: u32,
}

impl Identity {
    /// A copy collective (V forms: of `elem`-byte elements).
    pub(super) const fn copy(elem: u32) -> Self {
        Self {
            element: if elem > 0x7f { 0x7f } else { elem as u8 },
            operator: 0,
            algorithm: 0,
        }
    }

    /// A reduction of `T` with `op`.
    pub(super) fn reduction<T: Element, P: Operator>(op: P) -> Self {
        Self {
            element: 0x80 | T::DTYPE as u8,
            operator: op.kind() as u8 + 1,
            algorithm: 0,
        }
    }

    /// The same, naming the plan's algorithm too.
    pub(super) const fn with_algorithm(self, algorithm: u32) -> Self {
        Self { algorithm, ..self }
    }

    /// The call digest (see `snac::digest`): `size` is the bytes of a fixed-size call or the
    /// `max_count` of a V call; `counts` the counts packet (0 for a fixed-size call, whose
    /// symmetric buffers `staged` names there).
    pub(super) fn digest<C: Config, const K: u32>(
        self,
        c: &Checked<C, K>,
        size: u64,
        counts: u64,
    ) -> Digest {
        let kind = Checked::<C, K>::KIND;
        let plan = c.plan();
        let per_pair = if kind.semantics().per_pair() {
            digest::PER_PAIR_COUNTS
        } else {
            0
        };
        [
            digest::shape(
                kind.call(),
                self.element,
                self.operator,
                plan.mode,
                self.algorithm,
                c.args.blocks,
            ) | per_pair,
            size,
            digest::plan_word(&plan, c.ctx),
            counts,
        ]
    }
}

/// Bytes of shared memory at `args.smem`: `args.smem_bytes`, or when that is 0 (a fused
/// kernel's arguments), what the launch gave from `args.smem` to the end of the block's dynamic
/// shared memory; 0 when unknown (`args.smem` outside it, or the CPU emulation), meaning the
/// full layout the caller vouches for. A fused kernel launched with [`lean`]'s small shape
/// therefore runs the lean paths, and is refused any other, rather than run past its memory.
#[inline(always)]
fn smem_available(args: &SnacArgs) -> u32 {
    if args.smem_bytes != 0 {
        return args.smem_bytes;
    }
    let (base, size) = (
        crate::arch::dynamic_shared() as usize,
        crate::arch::dynamic_shared_bytes() as usize,
    );
    let at = args.smem as usize;
    if size != 0 && at >= base && at <= base + size {
        (base + size - at) as u32
    } else {
        0
    }
}

/// Whether this launch gave the Atom its shared memory (0 available: the caller vouches for
/// the full layout).
#[inline(always)]
fn atom_smem<A: Atom>(args: &SnacArgs) -> bool {
    let available = smem_available(args);
    available == 0 || available >= smem_bytes::<A>()
}

/// The V counts of a call, validated into the block's scratch (see
/// [`Checked::validated_counts`]).
#[derive(Clone, Copy)]
pub(super) struct Counts {
    /// The counts (`counts_per_rank × world`: for AllToAllV sent, then received).
    pub(super) counts: *const u64,
    /// Where each part starts, in elements: the sum of the counts before it in its half.
    pub(super) starts: *const u64,
    /// The digest's counts packet.
    pub(super) word: u64,
}

impl Counts {
    /// Half `h` (0, or 1 for a collective of two counts per rank) as `(counts, starts)`.
    ///
    /// # Safety
    /// `h < counts_per_rank`.
    #[inline(always)]
    pub(super) unsafe fn half(self, h: u32, world: u32) -> (*const u64, *const u64) {
        let at = (h * world) as usize;
        // SAFETY: the scratch holds `counts_per_rank × world` of each.
        unsafe { (self.counts.add(at), self.starts.add(at)) }
    }
}

impl<'a, C: Config, const K: u32> Checked<'a, C, K> {
    /// The collective.
    pub(super) const KIND: CollectiveKind = match CollectiveKind::from_u32(K) {
        Some(kind) => kind,
        None => panic!("not a collective's code"),
    };

    /// The plan to run with ([`Config::plan`] of the arguments').
    #[inline(always)]
    pub(super) fn plan(&self) -> Plan {
        C::plan(&self.args.plan)
    }

    /// Epoch slots the call keeps current (`args.coll_blocks`, within range).
    #[inline(always)]
    fn coll_blocks(&self) -> u32 {
        self.args
            .coll_blocks
            .clamp(self.args.blocks, MAX_BLOCKS as u32)
    }

    /// [`lean`] for this call.
    #[inline(always)]
    pub(super) fn lean(&self) -> bool {
        lean(
            Self::KIND,
            self.ctx.world,
            stream_bound(Self::KIND, self.args),
            &self.plan(),
            self.ctx.latency_window_bytes,
        )
    }

    /// Refuses (thread 0 records it) a path that needs the Atom's shared memory on a lean
    /// launch, or in a latency-only build ([`Config::LATENCY_ONLY`], where the path is compiled
    /// out); true when refused.
    #[inline(always)]
    fn lacks_atom_smem<A: Atom>(&self) -> bool {
        if !C::LATENCY_ONLY && atom_smem::<A>(self.args) {
            return false;
        }
        if self.ctx.state != 0 && crate::arch::thread_index() == 0 {
            let _ = self.detached().refuse(
                Refusal::SharedMemory,
                0,
                smem_bytes::<A>() as u64,
                self.args.smem_bytes as u64,
            );
        }
        true
    }

    /// This block's view of the call before it begins, to record a refusal.
    #[inline(always)]
    fn detached(&self) -> Call<'a> {
        Call::detached(self.ctx, Self::KIND.call(), self.args.block)
    }

    /// This block's SNAC scratch in its shared memory.
    ///
    /// # Safety
    /// `args.smem` holds `smem_bytes::<A>()` bytes, or `args.smem_bytes` (at least
    /// `SNAC_SMEM_BYTES`, checked) when that is less (the entry points' contract).
    #[inline(always)]
    pub(super) unsafe fn scratch<A: Atom>(&self) -> *mut u8 {
        if !atom_smem::<A>(self.args) {
            // A lean launch: the scratch is all there is (at least SNAC_SMEM_BYTES, checked).
            return self.args.smem;
        }
        // SAFETY: the caller's contract.
        unsafe { self.args.smem.add(scratch_offset::<A>() as usize) }
    }

    /// Begins the call on this block (see `Call::begin`) and announces this rank's arrival.
    ///
    /// # Safety
    /// As [`Checked::scratch`]; every thread of the block calls, with the same digest.
    #[inline(always)]
    pub(super) unsafe fn begin<A: Atom>(&self, digest: &Digest) -> Call<'a> {
        // SAFETY: the scratch as the caller guarantees; `ctx` valid; block checked.
        let call = unsafe {
            Call::begin(
                self.ctx,
                Self::KIND.call(),
                self.args.block,
                self.scratch::<A>(),
                digest,
                &self.args.plan,
                self.epoch,
            )
        };
        call.announce_arrival();
        call
    }

    /// Ends the call on this block: every block advances its epoch by `rounds` (see
    /// `Call::finish`).
    #[inline(always)]
    pub(super) fn finish(&self, call: &mut Call, rounds: u64) {
        call.finish(rounds, self.args.blocks, self.coll_blocks());
    }

    /// The V counts of this call, read once from `args.counts` into the block's scratch and
    /// checked there: every count at most `args.max_count`, no sum or byte size past 64 bits,
    /// and this rank's buffers large enough for what the counts describe. Records the refusal
    /// (thread 0) and returns `None` otherwise; else the validated counts and their parts'
    /// starts (`n` values each in shared memory, which the layouts then read: a count
    /// rewritten during the call cannot bypass the check) and the digest's counts packet;
    /// notes what the call moves, which decides its one pass (`SnacArgs::direct_min_bytes`).
    /// Every thread calls, and every thread reaches the same verdict from the shared copy.
    ///
    /// # Safety
    /// `args.counts` valid for `n = counts_per_rank × world` values; the scratch as
    /// [`Checked::scratch`] needs.
    #[inline(never)]
    pub(super) unsafe fn validated_counts<A: Atom>(&mut self, elem: u64) -> Option<Counts> {
        let (args, ctx, s) = (self.args, self.ctx, Self::KIND.semantics());
        let w = ctx.world as usize;
        let halves = s.counts_per_rank as usize;
        let n = halves * w;
        // SAFETY: the scratch holds SNAC_SMEM_BYTES (2 × MAX_RANKS counts and starts, and as
        // many address words, free until the call begins: the digest shares).
        let (counts, starts, shares) = unsafe {
            let scratch = self.scratch::<A>();
            (
                scratch.add(SCRATCH_COUNTS) as *mut u64,
                scratch.add(crate::snac::SCRATCH_STARTS) as *mut u64,
                scratch.add(SCRATCH_ADDRESSES) as *mut u64,
            )
        };
        // Every count read once, by one thread each: all the loads in flight at once (thread 0
        // reading them in turn waited one round trip per count: 9 µs for AllToAllV at 8 ranks).
        let (tid, threads) = (crate::arch::thread_index(), crate::arch::block_threads());
        let step = threads.max(1) as usize;
        let mut i = tid as usize;
        while i < n {
            // SAFETY: the caller guarantees `n` counts; volatile, since a graph replay may
            // have rewritten them; the scratch holds `2 × MAX_RANKS` counts.
            unsafe {
                counts
                    .add(i)
                    .write_volatile(args.counts.add(i).read_volatile())
            };
            i += step;
        }
        crate::arch::sync_block();
        let traced = args.plan.trace != 0;
        trace::mark(ctx, traced, args.block, trace::Point::Loaded);
        // Each count at once, one thread each (thread 0 checking them all while every other
        // thread waited took 1.0-1.4 µs of an 8-rank V call on an H100, RESULTS.md run 8): its
        // part's start (the sum of the counts before it in its half, from the shared copy),
        // whether it or that running sum is out of bounds, and its share of the digest.
        let max_count = args.max_count;
        let mut out_of_bounds = false;
        let mut i = tid as usize;
        while i < n {
            let half_start = if i < w { 0 } else { w };
            let (mut start, mut wrapped) = (0u64, false);
            for j in half_start..i {
                // SAFETY: inside the scratch, written before the barrier above.
                let (next, carry) = start.overflowing_add(unsafe { counts.add(j).read() });
                (start, wrapped) = (next, wrapped | carry);
            }
            // SAFETY: inside the scratch, written before the barrier above.
            let c = unsafe { counts.add(i).read() };
            out_of_bounds |= wrapped | start.overflowing_add(c).1 | (c > max_count);
            // SAFETY (both): inside the scratch (`2 × MAX_RANKS` of each).
            unsafe {
                starts.add(i).write(start);
                shares.add(i).write(digest::count_share(i, c));
            }
            i += step;
        }
        let out_of_bounds = crate::arch::sync_block_or(out_of_bounds);
        // SAFETY (every read below): inside the scratch, written before the barrier above and
        // unchanged until the call ends.
        let count = |i: usize| unsafe { counts.add(i).read() };
        let start = |i: usize| unsafe { starts.add(i).read() };
        let refusal = if out_of_bounds {
            // Which count, and why, only when one is refused (thread 0 records it).
            // SAFETY: `n` counts in the scratch.
            (tid == 0)
                .then(|| unsafe { first_refusal(counts, n, w, max_count) })
                .flatten()
                .or(Some((Refusal::SizeOverflow, 0, u64::MAX, u64::MAX)))
        } else {
            // What `src` and `dst` hold, from the first half of the counts and the last (no
            // sum wraps: checked above).
            let rank = ctx.rank as usize;
            let held = |extent: Extent, half: usize| match extent {
                Extent::Own => count(half * w + rank),
                Extent::All => start(half * w + w - 1) + count(half * w + w - 1),
            };
            let (src, dst) = (
                held(s.src, 0).checked_mul(elem),
                held(s.dst, halves - 1).checked_mul(elem),
            );
            // No peer compares what this rank sends itself with what it receives from itself;
            // the copy between the two would write the first into room for the second.
            if s.per_pair() && count(rank) != count(w + rank) {
                Some((Refusal::SelfCounts, ctx.rank, count(w + rank), count(rank)))
            } else {
                match (src, dst) {
                    (None, _) | (_, None) => Some((Refusal::SizeOverflow, 0, u64::MAX, u64::MAX)),
                    (Some(b), _) if b > args.src_bytes => {
                        Some((Refusal::SourceTooSmall, ctx.rank, args.src_bytes, b))
                    }
                    (_, Some(b)) if b > args.dst_bytes => {
                        Some((Refusal::DestinationTooSmall, ctx.rank, args.dst_bytes, b))
                    }
                    (Some(sb), Some(db))
                        if !aliasing_allowed(
                            args,
                            s.in_place,
                            sb,
                            db,
                            start(rank).saturating_mul(elem),
                        ) =>
                    {
                        Some((Refusal::Overlap, ctx.rank, 0, 0))
                    }
                    _ => None,
                }
            }
        };
        trace::mark(ctx, traced, args.block, trace::Point::Counted);
        if let Some((why, index, bound, value)) = refusal {
            if tid == 0 && ctx.state != 0 {
                let _ = self.detached().refuse(why, index, bound, value);
            }
            return None;
        }
        let word = if s.per_pair() {
            digest::PER_PAIR
        } else {
            // SAFETY: `n` shares, written before the barrier above (independent loads, summed
            // in any order).
            digest::counts_packet((0..n).fold(0, |sum, i| {
                sum.wrapping_add(unsafe { shares.add(i).read() })
            }))
        };
        // What decides the call's one pass (`SnacArgs::direct_min_bytes`), the same on every
        // rank: AllGatherV's and ReduceScatterV's bytes of every count (every rank's counts,
        // which the digest compares), AllToAllV's bound on a rank's sends (`max_count ×
        // world` elements: each rank knows only its own counts).
        self.moved = if s.per_pair() {
            args.max_count.saturating_mul(elem).saturating_mul(w as u64)
        } else {
            (start(w - 1) + count(w - 1)).saturating_mul(elem)
        };
        Some(Counts {
            counts,
            starts,
            word,
        })
    }

    /// Runs a collective's own packet path on this block: begins the call, runs `path` with it
    /// and finishes (one epoch). For a call that is [`lean`] on a world of two or more (that
    /// moves bytes, but for AllToAllV, whose ranks meet through its path either way); the
    /// path's window and bound checks are the caller's.
    ///
    /// # Safety
    /// As the entry points; every thread of every block calls, with the same digest.
    #[inline(always)]
    pub(super) unsafe fn packets<A: Atom>(
        self,
        digest: &Digest,
        path: impl FnOnce(&Call) -> Result<(), Left>,
    ) {
        // SAFETY: forwarded contract.
        let mut call = unsafe { self.begin::<A>(digest) };
        let _ = path(&call);
        self.finish(&mut call, 1);
    }

    /// A call that moves nothing on any rank (0 bytes, or every V count 0): the ranks still
    /// meet, so that every call advances every rank's epochs alike and compares digests.
    /// Every thread of every block calls.
    ///
    /// # Safety
    /// As the entry points.
    #[inline(never)]
    pub(super) unsafe fn empty<A: Atom>(self, digest: &Digest) {
        // SAFETY: forwarded contract.
        let mut call = unsafe { self.begin::<A>(digest) };
        let _ = call.await_digests();
        self.finish(&mut call, 1);
    }

    /// This block's share of a local copy (world 1), in whole 16-byte units.
    ///
    /// # Safety
    /// Both ranges valid for `len`, not overlapping.
    pub(super) unsafe fn local_copy<A: Atom>(self, dst: *mut u8, src: *const u8, len: u64) {
        if core::ptr::eq(dst, src) {
            return;
        }
        let (block, blocks) = (self.args.block, self.args.blocks);
        if self.lean() {
            // SAFETY: forwarded contract.
            return unsafe { latency::local::<NoReduce>(dst, src, len, block, blocks, None) };
        }
        if self.lacks_atom_smem::<A>() {
            return;
        }
        let (offset, n) = split_bytes(len as usize, 16, blocks as usize, block as usize);
        // SAFETY: the share lies inside both ranges.
        unsafe {
            transfer::copy::<A>(
                Coop::block(),
                dst.add(offset),
                src.add(offset),
                n,
                self.args.smem,
            )
        }
    }

    /// This block's share of a one-source reduce (world 1): rounds through `f32` like every
    /// reduction, so world 1 gives the same bits as a reduction would.
    ///
    /// # Safety
    /// Both ranges valid for `len` bytes of the reduction's type (they may be equal).
    pub(super) unsafe fn local_reduce<A: Atom, R: Reducer>(
        self,
        reducer: R,
        dst: *mut u8,
        src: *const u8,
        len: u64,
    ) {
        let (block, blocks) = (self.args.block, self.args.blocks);
        if self.lean() {
            // SAFETY: forwarded contract.
            return unsafe { latency::local(dst, src, len, block, blocks, Some(reducer)) };
        }
        if self.lacks_atom_smem::<A>() {
            return;
        }
        let (offset, n) = split_bytes(len as usize, 16, blocks as usize, block as usize);
        // SAFETY: the share lies inside both ranges, at an element boundary (16-byte units hold
        // whole elements, and so does the tail).
        unsafe {
            reducer.reduce::<A>(
                Coop::block(),
                &[dst.add(offset)],
                &[src.add(offset)],
                n as u64,
                self.args.smem,
            )
        }
    }

    /// Runs `streams` on this block: in one pass when its buffers are symmetric, else the
    /// throughput regime's staging. A call that is [`lean`] runs its collective's own packet
    /// path instead, before it gets here (in a latency-only build this path is refused).
    ///
    /// # Safety
    /// The streams describe valid buffers; every rank makes the same call.
    #[inline(never)]
    pub(super) unsafe fn staged<A: Atom, S: Streams + OnePass, R: Reducer>(
        self,
        streams: &S,
        reducer: R,
        digest: &Digest,
    ) {
        let args = self.args;
        if self.lacks_atom_smem::<A>() {
            return;
        }
        // Calls over symmetric buffers run one pass over them (as far as the collective's
        // layouts let a rank compute its peers' offsets), and their digest then names the
        // buffers.
        let access = Self::KIND.semantics().peers;
        // SAFETY: the tables hold `world` addresses (the entry points' contract).
        let symmetric = match unsafe { Symmetric::of(args, self.ctx.rank, access) } {
            Ok(sym) => sym,
            Err(why) => {
                if crate::arch::thread_index() == 0 {
                    let _ = self.detached().refuse(why, 0, 0, 0);
                }
                return;
            }
        };
        // Ordinary buffers the peers can reach (ranks of one process): the ranks exchange
        // their addresses and run the same one pass, unless one rank's are out of reach.
        let exchanges = symmetric.is_none()
            && access != PeerAccess::None
            && args.peers_reach != PeersReach::None
            && self.moved >= args.direct_min_bytes;
        let mut named = *digest;
        if let Some(sym) = symmetric {
            named[3] |= sym.digest_word();
        } else if exchanges {
            named[0] |= digest::EXCHANGES_ADDRESSES;
        }
        // SAFETY: `args.smem` holds the scratch (and the Atom's unless lean); `ctx` is valid
        // and `args.block < MAX_BLOCKS` (checked).
        let mut call = unsafe { self.begin::<A>(&named) };
        let one_pass = if exchanges {
            let reachable = args.peers_reach == PeersReach::Reachable;
            let dst = if reachable { args.dst as u64 } else { 0 };
            // What peer `q` reads from: this rank's `src`, or where its part for `q` starts
            // when only this rank knows that.
            let src = |q: u32| match (reachable, access) {
                (false, _) => 0,
                (true, PeerAccess::ReadAnnounced) => {
                    (args.src as u64).wrapping_add(streams.announced(q))
                }
                (true, _) => args.src as u64,
            };
            call.announce_addresses(src, dst);
            // SAFETY: the scratch holds SNAC_SMEM_BYTES (checked at entry), the addresses'
            // table at SCRATCH_ADDRESSES.
            let table = unsafe { self.scratch::<A>().add(SCRATCH_ADDRESSES) } as *mut u64;
            // SAFETY: as above.
            let collected = unsafe { call.rendezvous_exchanging(table, src, dst) };
            match collected {
                Err(Left) => return self.finish(&mut call, 1),
                // SAFETY: every rank's addresses are in the table.
                Ok(true) => unsafe {
                    Symmetric::exchanged(table, access, Self::KIND.is_v(), apart(args))
                },
                Ok(false) => None,
            }
        } else if symmetric.is_some() {
            if call.rendezvous().is_err() {
                return self.finish(&mut call, 1);
            }
            symmetric
        } else {
            None
        };
        if let Some(sym) = one_pass {
            // SAFETY: forwarded contract; every rank checked its own buffers, and the
            // rendezvous compared the digests (which name the buffers, or say that every rank
            // sent its addresses) before any peer's is touched.
            let _ = unsafe {
                symmetric::run::<A, _, R>(
                    &mut call,
                    streams,
                    sym,
                    args.src,
                    args.dst,
                    args.blocks,
                    reducer,
                    args.smem,
                )
            };
            self.finish(&mut call, 1);
            return;
        }
        let plan = self.plan();
        let Ok(engine) = Engine::new(&call, streams, &plan, args.smem) else {
            return;
        };
        let agreed = streams.agreed_len();
        if agreed.is_none() {
            call.post_extent(engine.local_rounds());
        }
        // SAFETY: forwarded contract.
        let ran = unsafe { engine.run::<A, R>(&mut call, args, &plan, reducer) };
        let rounds = match agreed {
            Some(len) => engine.geometry().chunks(len),
            // After a fault the other ranks may never post their extent: do not wait for it.
            None if ran.is_ok() => call.agree_extent().unwrap_or(1),
            None => 1,
        };
        self.finish(&mut call, rounds);
    }

    /// A copy collective over `streams`: the local stream at world 1, a meeting when the call
    /// moves nothing on any rank (`empty_call`), else [`Checked::staged`].
    ///
    /// # Safety
    /// As the copy collectives' entry points.
    pub(super) unsafe fn copy_streams<A: Atom, S: Streams + OnePass>(
        self,
        streams: &S,
        digest: &Digest,
        empty_call: bool,
    ) {
        if self.ctx.world == 1 {
            // World 1: the one local stream (consumer stream 0) over all blocks.
            if let Get::Local { src, dst, len } = streams.get(0) {
                // SAFETY: the streams describe the caller's buffers.
                unsafe { self.local_copy::<A>(dst, src, len) }
            }
            return;
        }
        if empty_call {
            // SAFETY: forwarded contract.
            return unsafe { self.empty::<A>(digest) };
        }
        // SAFETY: forwarded contract.
        unsafe { self.staged::<A, _, _>(streams, NoReduce, digest) }
    }
}
