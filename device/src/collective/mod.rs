//! The seven collectives, callable from any kernel (yours, fused with your own work, or
//! Purlin's host-launched ones in `purlin-kernels`).
//!
//! | collective | layouts | datapath |
//! | --- | --- | --- |
//! | [`all_gather`] / [`all_gather_v`] | packed → scattered | copy (packets when [`lean`]) |
//! | [`reduce_scatter`] / [`reduce_scatter_v`] | scattered → packed | reduce (packets when [`lean`]) |
//! | [`all_to_all`] / [`all_to_all_v`] | scattered → transposed | copy (packets when [`lean`]) |
//! | [`all_reduce`] | packed → packed | packets (one-/two-shot) or RS head + AG tail (direct at world 2) |
//!
//! The reductions take their operator as a type (`O: ReduceOp`, one datapath compiled) or, in
//! their `_op` forms ([`all_reduce_op`], [`reduce_scatter_op`], [`reduce_scatter_v_op`]), as a
//! run-time [`ReduceOpKind`]: the collective is then compiled once for its element type and
//! each reduce step `match`es the operator to one of four static datapaths. No form calls
//! through a function pointer.
//!
//! Every entry point takes the call's [`SnacArgs`] and the communicator's [`Context`] by
//! reference, wherever the kernel can read them: a kernel parameter read in place
//! ([`kernel_param!`](crate::kernel_param)), shared or global memory. (A reference to a local
//! value also works, but then every thread keeps its own copy in local memory: hundreds of
//! bytes of stores per thread before the call starts.)
//! Exactly `args.blocks` blocks enter, each with its `args.block`, all with the same number of
//! threads and [`smem_bytes::<A>()`](crate::snac::smem_bytes) bytes of shared memory at
//! `args.smem` (or, for a call [`lean`] says needs none of the Atom's, only
//! [`SNAC_SMEM_BYTES`], with `args.smem_bytes` saying so).
//! Every rank of the communicator must make the same call (same collective, plan, block count
//! and sizes). If a wait runs out of time or the arguments cannot be run, the
//! block records a [`Fault`](crate::snac::Fault) in the rank's local state and leaves; the
//! communicator must then be rebuilt.
//!
//! Calls on one context must be ordered: host launches on one stream are. A fused kernel may
//! make one call per context per launch (blocks of one launch are not synchronised between two
//! calls, and the second call's producers could overwrite staging a peer still reads).
//!
//! Reductions accumulate every element in `f32` over ranks `0..world` in order and round to
//! `T` once, on every path: results are bitwise identical across block counts, chunk sizes,
//! algorithms and fused or host-launched calls ([`ReductionMode::Deterministic`]).
//!
//! [`ReductionMode::Deterministic`]: crate::snac::ReductionMode::Deterministic
//!
//! ```
//! use purlin_device::atom::Host;
//! use purlin_device::collective::all_gather;
//! use purlin_device::emulation::{Buffer, Communicator};
//! use purlin_device::snac::{Runtime, SnacArgs};
//! // Two ranks on CPU threads, two blocks each.
//! let comm = Communicator::builder(2).build().unwrap();
//! let src: Vec<Buffer> = (0..2).map(|r| Buffer::from_slice(&[r as u8 + 1; 5])).collect();
//! let dst: Vec<Buffer> = (0..2).map(|_| Buffer::zeroed(10)).collect();
//! comm.launch(2, None, |rank, block, ctx, smem| {
//!     let mut args = SnacArgs::new(dst[rank as usize].as_mut_ptr(), src[rank as usize].as_ptr(), 5, 2);
//!     (args.block, args.smem) = (block, smem);
//!     // SAFETY: buffers hold 5 and 10 bytes; every rank makes the same call.
//!     unsafe { all_gather::<Host, Runtime>(&args, &ctx) };
//! }).unwrap();
//! assert_eq!(dst[1].bytes(), &[1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
//! ```

mod streams;

use crate::atom::Atom;
use crate::context::{Context, MAX_BLOCKS, MAX_RANKS};
use crate::coop::Coop;
use crate::element::Element;
use crate::layout::{
    Layout, Packed, PackedV, Scattered, ScatteredV, Split, Transposed, TransposedV,
};
use crate::op::{ReduceOp, ReduceOpKind};
use crate::partition::split_bytes;
use crate::snac::digest::{self, Digest};
use crate::snac::latency;
use crate::snac::staging::{Engine, Get, Streams};
use crate::snac::symmetric::{self, OnePass, Symmetric};
use crate::snac::sync::Call;
use crate::snac::trace;
use crate::snac::transfer::{self, NoReduce, Operator, Reducer, Static, Typed};
use crate::snac::{
    Algorithm, CollectiveKind, Config, Plan, Refusal, SCRATCH_COUNTS, SNAC_SMEM_BYTES, SnacArgs,
    scratch_offset, smem_bytes,
};
use streams::{Buffers, Composed, Direct, Exchange, Gather, Scatter};

/// Checks what every collective needs; records the refusal and returns `None` if the call
/// cannot run. Returns the number of epoch slots to keep current.
///
/// `elem` is the element size: sizes must be whole elements (V collectives: not zero);
/// `threads` is the most threads per block the Atom's shared memory is laid out for.
#[inline(always)]
fn check(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    elem: u64,
    threads: u32,
) -> Option<u32> {
    trace::mark(ctx, args.plan.trace != 0, args.block, trace::Point::Entry);
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
        fixed_capacity(args, ctx.world, ctx.rank, kind)
    };
    if let Some(why) = refusal {
        if ctx.state != 0 && crate::arch::thread_index() == 0 {
            let _ = Call::detached(ctx, kind, args.block).refuse(
                why,
                0,
                threads as u64,
                block_threads as u64,
            );
        }
        return None;
    }
    Some(args.coll_blocks.clamp(args.blocks, MAX_BLOCKS as u32))
}

/// A fixed-size collective's buffers against their capacities: `None` when they hold what the
/// call moves.
#[inline(always)]
fn fixed_capacity(args: &SnacArgs, world: u32, rank: u32, kind: CollectiveKind) -> Option<Refusal> {
    let (b, w) = (args.bytes, world as u64);
    let Some(all) = b.checked_mul(w) else {
        return Some(Refusal::SizeOverflow);
    };
    let (src, dst) = match kind {
        CollectiveKind::AllReduce => (b, b),
        CollectiveKind::AllGather => (b, all),
        CollectiveKind::ReduceScatter => (all, b),
        _ => (all, all),
    };
    if src > args.src_bytes {
        Some(Refusal::SourceTooSmall)
    } else if dst > args.dst_bytes {
        Some(Refusal::DestinationTooSmall)
    } else if !aliasing_allowed(args, kind, src, dst, b.saturating_mul(rank as u64)) {
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
    kind: CollectiveKind,
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
    match kind {
        CollectiveKind::AllReduce => s == d,
        CollectiveKind::AllGather | CollectiveKind::AllGatherV => d.checked_add(part) == Some(s),
        CollectiveKind::ReduceScatter | CollectiveKind::ReduceScatterV => {
            s.checked_add(part) == Some(d)
        }
        _ => false,
    }
}

/// What the digest says of a collective, besides the plan: its element and operator codes.
#[derive(Clone, Copy)]
struct Identity {
    kind: CollectiveKind,
    element: u8,
    operator: u8,
}

impl Identity {
    /// A copy collective (V forms: of `elem`-byte elements).
    const fn copy(kind: CollectiveKind, elem: u32) -> Self {
        Self {
            kind,
            element: if elem > 0x7f { 0x7f } else { elem as u8 },
            operator: 0,
        }
    }

    /// A reduction of `T` with `op`.
    fn reduction<T: Element, P: Operator>(kind: CollectiveKind, op: P) -> Self {
        Self {
            kind,
            element: 0x80 | T::DTYPE as u8,
            operator: op.kind() as u8 + 1,
        }
    }

    /// The call digest (see `snac::digest`): `size` is the bytes of a fixed-size call or the
    /// `max_count` of a V call; `counts` the counts packet (0 for a fixed-size call, whose
    /// symmetric buffers `staged` names there).
    fn digest(self, args: &SnacArgs, ctx: &Context, plan: &Plan, size: u64, counts: u64) -> Digest {
        let algorithm = if self.kind == CollectiveKind::AllReduce {
            plan.algorithm
        } else {
            0
        };
        [
            digest::shape(
                self.kind,
                self.element,
                self.operator,
                plan.mode,
                algorithm,
                args.blocks,
            ),
            size,
            digest::plan_word(plan, ctx),
            counts,
        ]
    }
}

/// Largest world-1 call (bytes per part) that runs through registers rather than the Atom.
pub const LEAN_LOCAL_MAX_BYTES: u64 = 256 << 10;

/// The bound on every stream of a call: the part size of a fixed-size collective, or the
/// largest count a V call may hold, in bytes (`u64::MAX` when unbounded). Every rank computes
/// the same value, from arguments the call digest compares.
///
/// ```
/// use purlin_device::collective::stream_bound;
/// use purlin_device::snac::{CollectiveKind, SnacArgs};
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
/// [`SNAC_SMEM_BYTES`]: at world 1 a register copy up to
/// [`LEAN_LOCAL_MAX_BYTES`]; AllReduce's one-/two-shot packets; the other collectives' packets
/// when every stream fits a latency window of `window` bytes and `bound × world` is within the
/// plan's `latency_threshold` (a forced `Throughput` algorithm never). The host launches such a
/// call lean and the device takes the same decision from the same arguments.
///
/// ```
/// use purlin_device::collective::lean;
/// use purlin_device::snac::{CollectiveKind, Plan};
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
            !matches!(plan.algorithm(), Algorithm::Throughput)
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

/// Refuses (thread 0 records it) a path that needs the Atom's shared memory on a lean launch,
/// or in a latency-only build ([`Config::LATENCY_ONLY`], where the path is compiled out); true
/// when refused.
#[inline(always)]
fn lacks_atom_smem<A: Atom, C: Config>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
) -> bool {
    if !C::LATENCY_ONLY && atom_smem::<A>(args) {
        return false;
    }
    if ctx.state != 0 && crate::arch::thread_index() == 0 {
        let _ = Call::detached(ctx, kind, args.block).refuse(
            Refusal::SharedMemory,
            0,
            smem_bytes::<A>() as u64,
            args.smem_bytes as u64,
        );
    }
    true
}

/// [`lean`] for this call.
#[inline(always)]
fn lean_call(args: &SnacArgs, ctx: &Context, kind: CollectiveKind, plan: &Plan) -> bool {
    lean(
        kind,
        ctx.world,
        stream_bound(kind, args),
        plan,
        ctx.latency_window_bytes,
    )
}

/// This block's SNAC scratch in its shared memory.
///
/// # Safety
/// `args.smem` holds `smem_bytes::<A>()` bytes, or `args.smem_bytes` (at least
/// `SNAC_SMEM_BYTES`, checked) when that is less (the entry points' contract).
#[inline(always)]
unsafe fn scratch<A: Atom>(args: &SnacArgs) -> *mut u8 {
    if !atom_smem::<A>(args) {
        // A lean launch: the scratch is all there is (at least SNAC_SMEM_BYTES, checked).
        return args.smem;
    }
    // SAFETY: the caller's contract.
    unsafe { args.smem.add(scratch_offset::<A>() as usize) }
}

/// The V counts of a call, validated into the block's scratch (see [`validated_counts`]).
#[derive(Clone, Copy)]
struct Counts {
    /// The counts (`world`, or `2 × world` for AllToAllV: sent, then received).
    counts: *const u64,
    /// Where each part starts, in elements: the sum of the counts before it in its half.
    starts: *const u64,
    /// The digest's counts packet.
    word: u64,
}

impl Counts {
    /// Half `h` (0, or 1 for the AllToAllV counts received) as `(counts, starts)`.
    ///
    /// # Safety
    /// `h` is 0, or 1 for AllToAllV.
    #[inline(always)]
    unsafe fn half(self, h: u32, world: u32) -> (*const u64, *const u64) {
        let at = (h * world) as usize;
        // SAFETY: the scratch holds `2 × world` of each for AllToAllV, `world` otherwise.
        unsafe { (self.counts.add(at), self.starts.add(at)) }
    }
}

/// The V counts of this call, read once from `args.counts` into the block's scratch and
/// checked there (thread 0): every count at most `args.max_count`, no sum or byte size past 64
/// bits, and this rank's buffers large enough for what the counts describe. Records the
/// refusal and returns `None` otherwise; else the validated counts and their parts' starts
/// (`n` values each in shared memory, which the layouts then read: a count rewritten during
/// the call cannot bypass the check) and the digest's counts packet. Every thread calls.
///
/// # Safety
/// `args.counts` valid for `n` values (`world`, or `2 × world` for AllToAllV); `scratch` as
/// [`scratch`] returns.
#[inline(never)]
unsafe fn validated_counts(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    elem: u64,
    scratch: *mut u8,
) -> Option<Counts> {
    let w = ctx.world as usize;
    let n = if kind == CollectiveKind::AllToAllV {
        2 * w
    } else {
        w
    };
    // SAFETY: the scratch holds SNAC_SMEM_BYTES (2 × MAX_RANKS counts and starts, the status
    // words).
    let (counts, starts, status) = unsafe {
        (
            scratch.add(SCRATCH_COUNTS) as *mut u64,
            scratch.add(crate::snac::SCRATCH_STARTS) as *mut u64,
            scratch.add(crate::snac::SCRATCH_STATUS) as *mut u64,
        )
    };
    // Every count read once, by one thread each: all the loads in flight at once (thread 0
    // reading them in turn waited one round trip per count: 9 µs for AllToAllV at 8 ranks).
    let (tid, threads) = (crate::arch::thread_index(), crate::arch::block_threads());
    let mut i = tid as usize;
    while i < n {
        // SAFETY: the caller guarantees `n` counts; volatile, since a graph replay may have
        // rewritten them; the scratch holds `2 × MAX_RANKS` counts.
        unsafe {
            counts
                .add(i)
                .write_volatile(args.counts.add(i).read_volatile())
        };
        i += threads.max(1) as usize;
    }
    crate::arch::sync_block();
    if tid == 0 {
        let mut sums = [0u64; 2];
        let mut refusal: Option<(Refusal, u32, u64, u64)> = None;
        let mut words = [0u64; 2 * MAX_RANKS];
        for (i, word) in words.iter_mut().enumerate().take(n) {
            // SAFETY: inside the scratch, written before the barrier above.
            let c = unsafe { counts.add(i).read_volatile() };
            *word = c;
            if refusal.is_none() && c > args.max_count {
                refusal = Some((Refusal::CountAboveMax, i as u32, args.max_count, c));
            }
            let half = i / w;
            // SAFETY: inside the scratch (`2 × MAX_RANKS` starts); a wrapped start is never
            // read, since the overflow refuses the call.
            unsafe { starts.add(i).write_volatile(sums[half]) };
            match sums[half].checked_add(c) {
                Some(s) => sums[half] = s,
                None if refusal.is_none() => {
                    refusal = Some((Refusal::SizeOverflow, i as u32, u64::MAX, c))
                }
                None => {}
            }
        }
        let mine = words[ctx.rank as usize];
        // SAFETY: written just above (the sum of this half's counts before this rank's).
        let before = unsafe { starts.add(ctx.rank as usize).read_volatile() };
        let (src, dst) = match kind {
            CollectiveKind::AllGatherV => (mine.checked_mul(elem), sums[0].checked_mul(elem)),
            CollectiveKind::ReduceScatterV => (sums[0].checked_mul(elem), mine.checked_mul(elem)),
            _ => (sums[0].checked_mul(elem), sums[1].checked_mul(elem)),
        };
        if refusal.is_none() {
            refusal = match (src, dst) {
                (None, _) | (_, None) => Some((Refusal::SizeOverflow, 0, u64::MAX, u64::MAX)),
                (Some(s), _) if s > args.src_bytes => {
                    Some((Refusal::SourceTooSmall, ctx.rank, args.src_bytes, s))
                }
                (_, Some(d)) if d > args.dst_bytes => {
                    Some((Refusal::DestinationTooSmall, ctx.rank, args.dst_bytes, d))
                }
                (Some(s), Some(d))
                    if !aliasing_allowed(args, kind, s, d, before.saturating_mul(elem)) =>
                {
                    Some((Refusal::Overlap, ctx.rank, 0, 0))
                }
                _ => None,
            };
        }
        let word = match refusal {
            Some((why, index, bound, value)) => {
                if ctx.state != 0 {
                    let _ = Call::detached(ctx, kind, args.block).refuse(why, index, bound, value);
                }
                u64::MAX
            }
            None if kind == CollectiveKind::AllToAllV => digest::PER_PAIR - 1,
            None => digest::hash(&words[..n]) as u64,
        };
        // SAFETY: inside the scratch.
        unsafe { status.write_volatile(word) };
    }
    crate::arch::sync_block();
    // SAFETY: written by thread 0 before the barrier; rewritten only by the next call.
    let word = match unsafe { status.read_volatile() } {
        u64::MAX => return None,
        w if w == digest::PER_PAIR - 1 => digest::PER_PAIR,
        w => w,
    };
    Some(Counts {
        counts,
        starts,
        word,
    })
}

/// A call that moves nothing on any rank (0 bytes, or every V count 0): the ranks still meet,
/// so that every call advances every rank's epochs alike and compares digests. Every thread
/// of every block calls.
///
/// # Safety
/// As the entry points.
#[inline(never)]
unsafe fn empty<A: Atom>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    coll_blocks: u32,
    digest: &Digest,
) {
    // SAFETY: `args.smem` holds `smem_bytes::<A>()`; `ctx` valid; block checked.
    let mut call = unsafe {
        Call::begin(
            ctx,
            kind,
            args.block,
            scratch::<A>(args),
            digest,
            &args.plan,
        )
    };
    call.announce_arrival();
    let _ = call.await_digests();
    call.finish(1, args.blocks, coll_blocks);
}

/// This block's share of a local copy (world 1), in whole 16-byte units.
///
/// # Safety
/// Both ranges valid for `len`, not overlapping.
unsafe fn local_copy<A: Atom, C: Config>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    dst: *mut u8,
    src: *const u8,
    len: u64,
) {
    if core::ptr::eq(dst, src) {
        return;
    }
    if lean_call(args, ctx, kind, plan) {
        // SAFETY: forwarded contract.
        return unsafe { latency::local::<NoReduce>(dst, src, len, args.block, args.blocks, None) };
    }
    if lacks_atom_smem::<A, C>(args, ctx, kind) {
        return;
    }
    let (offset, n) = split_bytes(len as usize, 16, args.blocks as usize, args.block as usize);
    // SAFETY: the share lies inside both ranges.
    unsafe {
        transfer::copy::<A>(
            Coop::block(),
            dst.add(offset),
            src.add(offset),
            n,
            args.smem,
        )
    }
}

/// This block's share of a one-source reduce (world 1): rounds through `f32` like every
/// reduction, so world 1 gives the same bits as a reduction would.
///
/// # Safety
/// Both ranges valid for `len` bytes of the reduction's type (they may be equal).
#[allow(clippy::too_many_arguments)]
unsafe fn local_reduce<A: Atom, C: Config, R: Reducer>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    reducer: R,
    dst: *mut u8,
    src: *const u8,
    len: u64,
) {
    if lean_call(args, ctx, kind, plan) {
        // SAFETY: forwarded contract.
        return unsafe { latency::local(dst, src, len, args.block, args.blocks, Some(reducer)) };
    }
    if lacks_atom_smem::<A, C>(args, ctx, kind) {
        return;
    }
    let (offset, n) = split_bytes(len as usize, 16, args.blocks as usize, args.block as usize);
    // SAFETY: the share lies inside both ranges, at an element boundary (16-byte units hold
    // whole elements, and so does the tail).
    unsafe {
        reducer.reduce::<A>(
            Coop::block(),
            &[dst.add(offset)],
            &[src.add(offset)],
            n as u64,
            args.smem,
        )
    }
}

/// Runs `streams` on this block: over packets when the call is [`lean`], else the throughput
/// regime.
///
/// # Safety
/// The streams describe valid buffers; every rank makes the same call.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
unsafe fn staged<A: Atom, C: Config, S: Streams + OnePass, R: Reducer>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    streams: &S,
    reducer: R,
    digest: &Digest,
) {
    let packets = lean_call(args, ctx, kind, plan);
    if !packets && lacks_atom_smem::<A, C>(args, ctx, kind) {
        return;
    }
    // Calls over symmetric buffers run one pass over them (all but AllToAllV, whose layouts do
    // not let a rank compute its peers' offsets), and their digest then names the buffers; the
    // packet paths stage nothing either way.
    let symmetric = if packets {
        None
    } else {
        // SAFETY: the tables hold `world` addresses (the entry points' contract).
        match unsafe { Symmetric::of(args, ctx.rank, kind) } {
            Ok(sym) => sym,
            Err(why) => {
                if crate::arch::thread_index() == 0 {
                    let _ = Call::detached(ctx, kind, args.block).refuse(why, 0, 0, 0);
                }
                return;
            }
        }
    };
    let mut named = *digest;
    if let Some(sym) = symmetric {
        named[3] |= sym.digest_word();
    }
    let digest = &named;
    // SAFETY: `args.smem` holds the scratch (and the Atom's unless lean); `ctx` is valid and
    // `args.block < MAX_BLOCKS` (checked).
    let mut call = unsafe {
        Call::begin(
            ctx,
            kind,
            args.block,
            scratch::<A>(args),
            digest,
            &args.plan,
        )
    };
    call.announce_arrival();
    if packets {
        let bound = stream_bound(kind, args);
        // SAFETY: forwarded contract; every stream fits a window and the bound (`lean`).
        let _ = unsafe { latency::streams(&call, streams, args.blocks, reducer, bound) };
        call.finish(1, args.blocks, coll_blocks);
        return;
    }
    if let Some(sym) = symmetric {
        // SAFETY: forwarded contract; every rank checked its own buffers, and the rendezvous
        // compares the digests (which name the buffers) before any peer's is touched.
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
        call.finish(1, args.blocks, coll_blocks);
        return;
    }
    let Ok(engine) = Engine::new(&call, streams, plan, args.smem) else {
        return;
    };
    let agreed = streams.agreed_len();
    if agreed.is_none() {
        call.post_extent(engine.local_rounds());
    }
    // SAFETY: forwarded contract.
    let ran = unsafe { engine.run::<A, R>(&mut call, args, plan, reducer) };
    let rounds = match agreed {
        Some(len) => engine.geometry().chunks(len),
        // After a fault the other ranks may never post their extent: do not wait for it.
        None if ran.is_ok() => call.agree_extent().unwrap_or(1),
        None => 1,
    };
    call.finish(rounds, args.blocks, coll_blocks);
}

/// The AllReduce algorithm a call of `bytes` bytes runs with `plan` on `world` ranks whose
/// latency windows hold `window` bytes: the plan's choice when it fits, else the throughput
/// regime; `Auto` picks one-shot, two-shot (from `two_shot_min_bytes` at
/// `two_shot_min_world` ranks) or throughput (above `latency_threshold`).
///
/// ```
/// use purlin_device::collective::all_reduce_algorithm;
/// use purlin_device::snac::{Algorithm, Plan};
/// let plan = Plan::default();
/// assert_eq!(all_reduce_algorithm(&plan, 4096, 8, 4 << 20), Algorithm::OneShot);
/// assert_eq!(all_reduce_algorithm(&plan, 128 << 10, 8, 4 << 20), Algorithm::TwoShot);
/// assert_eq!(all_reduce_algorithm(&plan, 1 << 20, 8, 4 << 20), Algorithm::Throughput);
/// ```
pub const fn all_reduce_algorithm(plan: &Plan, bytes: u64, world: u32, window: u64) -> Algorithm {
    let aligned = window % 32 == 0;
    let one = aligned && latency::one_shot_fits(bytes, window);
    let two = aligned && world > 1 && latency::two_shot_fits(bytes, world as u64, window);
    match plan.algorithm() {
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

/// Declares a reduction collective's two entry points, both running `$with` (with `$form`, if
/// given, as its last generic argument: the fixed or V form): `$typed`, specialised for the
/// operator type `O`, and `$op`, for an operator chosen at run time.
macro_rules! reduction_entry_points {
    (
        $(#[$typed_doc:meta])*
        pub unsafe fn $typed:ident;

        $(#[$op_doc:meta])*
        pub unsafe fn $op:ident;

        => $with:ident $(, $form:literal)?
    ) => {
        $(#[$typed_doc])*
        #[inline(always)]
        pub unsafe fn $typed<A: Atom, C: Config, T: Element, O: ReduceOp>(
            args: &SnacArgs,
            ctx: &Context,
        ) {
            let plan = C::plan(&args.plan);
            // SAFETY: forwarded contract.
            unsafe { $with::<A, C, T, _ $(, $form)?>(args, ctx, &plan, Static::<O>::NEW) }
        }

        $(#[$op_doc])*
        #[inline(always)]
        pub unsafe fn $op<A: Atom, C: Config, T: Element>(
            args: &SnacArgs,
            ctx: &Context,
            op: ReduceOpKind,
        ) {
            let plan = C::plan(&args.plan);
            // SAFETY: forwarded contract.
            unsafe { $with::<A, C, T, _ $(, $form)?>(args, ctx, &plan, op) }
        }
    };
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
    plan: &Plan,
    op: P,
) {
    let kind = CollectiveKind::AllReduce;
    let size = core::mem::size_of::<T>() as u64;
    let Some(coll_blocks) = check(args, ctx, kind, size, A::THREADS) else {
        return;
    };
    let bytes = args.bytes;
    let reducer = Typed::<T, P>::new(op);
    if ctx.world == 1 {
        // SAFETY: forwarded contract.
        return unsafe {
            local_reduce::<A, C, _>(args, ctx, kind, plan, reducer, args.dst, args.src, bytes)
        };
    }
    let digest = Identity::reduction::<T, P>(kind, op).digest(args, ctx, plan, bytes, 0);
    if bytes == 0 {
        // SAFETY: forwarded contract.
        return unsafe { empty::<A>(args, ctx, kind, coll_blocks, &digest) };
    }
    let algorithm = all_reduce_algorithm(plan, bytes, ctx.world, ctx.latency_window_bytes);
    let b = Buffers::of(args, ctx);
    match algorithm {
        Algorithm::OneShot | Algorithm::TwoShot => {
            // SAFETY: `args.smem` holds `smem_bytes::<A>()`; `ctx` valid; block checked.
            let mut call = unsafe {
                Call::begin(
                    ctx,
                    kind,
                    args.block,
                    scratch::<A>(args),
                    &digest,
                    &args.plan,
                )
            };
            call.announce_arrival();
            let (dst, src, blocks) = (args.dst, args.src, args.blocks);
            // SAFETY (both arms): forwarded contract; the payload fits the windows (checked by
            // the choice).
            let _ = if algorithm == Algorithm::OneShot {
                unsafe { latency::one_shot::<T, P>(&call, dst, src, bytes, blocks, op) }
            } else {
                unsafe { latency::two_shot::<T, P>(&call, dst, src, bytes, blocks, op) }
            };
            call.finish(1, args.blocks, coll_blocks);
        }
        _ if ctx.world == 2 => {
            let streams = Direct { b, bytes };
            // SAFETY: forwarded contract.
            unsafe {
                staged::<A, C, _, _>(
                    args,
                    ctx,
                    kind,
                    plan,
                    coll_blocks,
                    &streams,
                    reducer,
                    &digest,
                )
            }
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
            unsafe {
                staged::<A, C, _, _>(
                    args,
                    ctx,
                    kind,
                    plan,
                    coll_blocks,
                    &streams,
                    reducer,
                    &digest,
                )
            }
        }
    }
}

reduction_entry_points! {
    /// ReduceScatter: rank `r`'s `dst` (`args.bytes` bytes) is the reduction over all ranks of
    /// part `r` of their `src` (`world × args.bytes` bytes). `dst` may be part `r` of `src`.
    ///
    /// # Safety
    /// As [`all_reduce`], with `src` valid for `world × args.bytes` bytes.
    pub unsafe fn reduce_scatter;

    /// [`reduce_scatter`] with the operator chosen at run time (see [`all_reduce_op`]).
    ///
    /// # Safety
    /// As [`reduce_scatter`].
    pub unsafe fn reduce_scatter_op;

    => reduce_scatter_with, false
}

reduction_entry_points! {
    /// ReduceScatterV: as [`reduce_scatter`] with parts of `counts[q]` elements (`world` counts in
    /// memory at `args.counts`, the same on every rank); `src` holds them all in rank order.
    ///
    /// # Safety
    /// As [`reduce_scatter`]; `args.counts` valid for `world` values while the call runs.
    pub unsafe fn reduce_scatter_v;

    /// [`reduce_scatter_v`] with the operator chosen at run time (see [`all_reduce_op`]).
    ///
    /// # Safety
    /// As [`reduce_scatter_v`].
    pub unsafe fn reduce_scatter_v_op;

    => reduce_scatter_with, true
}

/// # Safety
/// As [`reduce_scatter`] or [`reduce_scatter_v`].
#[inline(never)]
unsafe fn reduce_scatter_with<A: Atom, C: Config, T: Element, P: Operator, const V: bool>(
    args: &SnacArgs,
    ctx: &Context,
    plan: &Plan,
    op: P,
) {
    let kind = if V {
        CollectiveKind::ReduceScatterV
    } else {
        CollectiveKind::ReduceScatter
    };
    let size = core::mem::size_of::<T>() as u64;
    let Some(coll_blocks) = check(args, ctx, kind, size, A::THREADS) else {
        return;
    };
    let reducer = Typed::<T, P>::new(op);
    let id = Identity::reduction::<T, P>(kind, op);
    // The V counts are elements of T, whatever the caller put in `elem_bytes` (the host puts
    // the type's size): the lean decision's stream bound must be in bytes of T.
    let args = &SnacArgs {
        elem_bytes: size as u32,
        ..*args
    };
    if V {
        // SAFETY: forwarded contract (`world` counts).
        let Some(v) = (unsafe { validated_counts(args, ctx, kind, size, scratch::<A>(args)) })
        else {
            return;
        };
        let layout = ScatteredV {
            counts: v.counts,
            starts: v.starts,
            elem_bytes: size as u32,
        };
        let digest = id.digest(args, ctx, plan, args.max_count, v.word);
        // SAFETY: forwarded contract.
        unsafe {
            scatter::<A, C, _, _>(args, ctx, kind, plan, coll_blocks, layout, reducer, &digest)
        }
    } else {
        let layout = Scattered { bytes: args.bytes };
        let digest = id.digest(args, ctx, plan, args.bytes, 0);
        // SAFETY: forwarded contract.
        unsafe {
            scatter::<A, C, _, _>(args, ctx, kind, plan, coll_blocks, layout, reducer, &digest)
        }
    }
}

/// # Safety
/// As [`reduce_scatter`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn scatter<A: Atom, C: Config, L: Layout, R: Reducer>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    layout: L,
    reducer: R,
    digest: &Digest,
) {
    if ctx.world == 1 {
        let (offset, len) = layout.part(0, 0);
        // SAFETY: forwarded contract.
        return unsafe {
            local_reduce::<A, C, R>(
                args,
                ctx,
                kind,
                plan,
                reducer,
                args.dst,
                args.src.add(offset as usize),
                len,
            )
        };
    }
    if layout.max_part(ctx.world) == Some(0) {
        // SAFETY: forwarded contract.
        return unsafe { empty::<A>(args, ctx, kind, coll_blocks, digest) };
    }
    let streams = Scatter {
        b: Buffers::of(args, ctx),
        src: layout,
    };
    // SAFETY: forwarded contract.
    unsafe {
        staged::<A, C, _, R>(
            args,
            ctx,
            kind,
            plan,
            coll_blocks,
            &streams,
            reducer,
            digest,
        )
    }
}

/// AllGather: part `p` of every rank's `dst` (`world × args.bytes` bytes) is rank `p`'s `src`
/// (`args.bytes` bytes). In place (`src` is part `r` of `dst` on rank `r`) is allowed.
///
/// # Safety
/// As [`all_reduce`], with the sizes above.
#[inline(always)]
pub unsafe fn all_gather<A: Atom, C: Config>(args: &SnacArgs, ctx: &Context) {
    let kind = CollectiveKind::AllGather;
    let Some(coll_blocks) = check(args, ctx, kind, 1, A::THREADS) else {
        return;
    };
    let (src, dst) = (
        Packed { bytes: args.bytes },
        Scattered { bytes: args.bytes },
    );
    let plan = C::plan(&args.plan);
    let digest = Identity::copy(kind, 1).digest(args, ctx, &plan, args.bytes, 0);
    // SAFETY: forwarded contract.
    unsafe { gather_with::<A, C, _, _>(args, ctx, kind, &plan, coll_blocks, src, dst, &digest) }
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
    let kind = CollectiveKind::AllGatherV;
    let elem = args.elem_bytes as u64;
    let Some(coll_blocks) = check(args, ctx, kind, elem, A::THREADS) else {
        return;
    };
    // SAFETY: forwarded contract (`world` counts).
    let Some(v) = (unsafe { validated_counts(args, ctx, kind, elem, scratch::<A>(args)) }) else {
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
    let plan = C::plan(&args.plan);
    let digest =
        Identity::copy(kind, args.elem_bytes).digest(args, ctx, &plan, args.max_count, v.word);
    // SAFETY: forwarded contract.
    unsafe { gather_with::<A, C, _, _>(args, ctx, kind, &plan, coll_blocks, src, dst, &digest) }
}

/// # Safety
/// As [`all_gather`].
#[allow(clippy::too_many_arguments)]
unsafe fn gather_with<A: Atom, C: Config, S: Layout, D: Layout>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    src: S,
    dst: D,
    digest: &Digest,
) {
    let empty_call = dst.max_part(ctx.world) == Some(0);
    let streams = Gather {
        b: Buffers::of(args, ctx),
        src,
        dst,
    };
    // SAFETY: forwarded contract.
    unsafe {
        copy_streams::<A, C, _>(
            args,
            ctx,
            kind,
            plan,
            coll_blocks,
            &streams,
            digest,
            empty_call,
        )
    }
}

/// A copy collective over `streams`: the local stream at world 1, a meeting when the call
/// moves nothing on any rank, else the throughput regime.
///
/// # Safety
/// As the copy collectives' entry points.
#[allow(clippy::too_many_arguments)]
unsafe fn copy_streams<A: Atom, C: Config, S: Streams + OnePass>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    streams: &S,
    digest: &Digest,
    empty_call: bool,
) {
    if ctx.world == 1 {
        return local::<A, C, _>(args, ctx, kind, plan, streams);
    }
    if empty_call {
        // SAFETY: forwarded contract.
        return unsafe { empty::<A>(args, ctx, kind, coll_blocks, digest) };
    }
    // SAFETY: forwarded contract.
    unsafe {
        staged::<A, C, _, _>(
            args,
            ctx,
            kind,
            plan,
            coll_blocks,
            streams,
            NoReduce,
            digest,
        )
    }
}

/// World 1: run the one local stream (consumer stream 0) over all blocks.
fn local<A: Atom, C: Config, S: Streams>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    streams: &S,
) {
    if let Get::Local { src, dst, len } = streams.get(0) {
        // SAFETY: the streams describe the caller's buffers.
        unsafe { local_copy::<A, C>(args, ctx, kind, plan, dst, src, len) }
    }
}

/// AllToAll: part `q` of rank `p`'s `src` becomes part `p` of rank `q`'s `dst` (both
/// `world × args.bytes` bytes). Not in place.
///
/// # Safety
/// As [`all_reduce`], with the sizes above.
#[inline(always)]
pub unsafe fn all_to_all<A: Atom, C: Config>(args: &SnacArgs, ctx: &Context) {
    let kind = CollectiveKind::AllToAll;
    let Some(coll_blocks) = check(args, ctx, kind, 1, A::THREADS) else {
        return;
    };
    let (src, dst) = (
        Scattered { bytes: args.bytes },
        Transposed { bytes: args.bytes },
    );
    let plan = C::plan(&args.plan);
    let digest = Identity::copy(kind, 1).digest(args, ctx, &plan, args.bytes, 0);
    let empty_call = args.bytes == 0;
    // SAFETY: forwarded contract.
    unsafe {
        exchange_with::<A, C, _, _>(
            args,
            ctx,
            kind,
            &plan,
            coll_blocks,
            src,
            dst,
            &digest,
            empty_call,
        )
    }
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
    let kind = CollectiveKind::AllToAllV;
    let elem = args.elem_bytes as u64;
    let Some(coll_blocks) = check(args, ctx, kind, elem, A::THREADS) else {
        return;
    };
    // SAFETY: forwarded contract (`2 × world` counts).
    let Some(v) = (unsafe { validated_counts(args, ctx, kind, elem, scratch::<A>(args)) }) else {
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
    let plan = C::plan(&args.plan);
    let digest =
        Identity::copy(kind, args.elem_bytes).digest(args, ctx, &plan, args.max_count, v.word);
    // AllToAllV always runs the protocol: a rank with nothing to send or receive still agrees
    // on the size with the others.
    // SAFETY: forwarded contract.
    unsafe {
        exchange_with::<A, C, _, _>(
            args,
            ctx,
            kind,
            &plan,
            coll_blocks,
            src,
            dst,
            &digest,
            false,
        )
    }
}

/// # Safety
/// As [`all_to_all`].
#[allow(clippy::too_many_arguments)]
unsafe fn exchange_with<A: Atom, C: Config, S: Layout, D: Layout>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    src: S,
    dst: D,
    digest: &Digest,
    empty_call: bool,
) {
    let streams = Exchange {
        b: Buffers::of(args, ctx),
        src,
        dst,
    };
    // SAFETY: forwarded contract.
    unsafe {
        copy_streams::<A, C, _>(
            args,
            ctx,
            kind,
            plan,
            coll_blocks,
            &streams,
            digest,
            empty_call,
        )
    }
}
