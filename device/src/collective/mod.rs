//! The seven collectives, callable from any kernel (yours, fused with your own work, or
//! Purlin's host-launched ones in `purlin-kernels`).
//!
//! | collective | layouts | datapath |
//! | --- | --- | --- |
//! | [`all_gather`] / [`all_gather_v`] | packed → scattered | copy |
//! | [`reduce_scatter`] / [`reduce_scatter_v`] | scattered → packed | reduce |
//! | [`all_to_all`] / [`all_to_all_v`] | scattered → transposed | copy |
//! | [`all_reduce`] | packed → packed | packets (one-/two-shot) or RS head + AG tail (direct at world 2) |
//!
//! The reductions take their operator as a type (`O: ReduceOp`, one datapath compiled) or, in
//! their `_op` forms ([`all_reduce_op`], [`reduce_scatter_op`], [`reduce_scatter_v_op`]), as a
//! run-time [`ReduceOpKind`]: the collective is then compiled once for its element type and
//! each reduce step `match`es the operator to one of four static datapaths. No form calls
//! through a function pointer.
//!
//! Every entry point takes the call's [`SnacArgs`] and the communicator's [`Context`] by value.
//! Exactly `args.blocks` blocks enter, each with its `args.block`, all with the same number of
//! threads and [`smem_bytes::<A>()`](crate::snac::smem_bytes) bytes of shared memory at
//! `args.smem`. Every rank of the communicator must make the same call (same collective, plan,
//! block count and sizes). If a wait runs out of time or the arguments cannot be run, the
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
//!     unsafe { all_gather::<Host, Runtime>(args, ctx) };
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
use crate::snac::latency;
use crate::snac::staging::{Engine, Get, Streams};
use crate::snac::sync::Call;
use crate::snac::transfer::{self, NoReduce, Operator, Reducer, Static, Typed};
use crate::snac::{Algorithm, CollectiveKind, Config, Plan, SnacArgs, scratch_offset};
use streams::{Buffers, Composed, Direct, Exchange, Gather, Scatter};

/// Checks what every collective needs; records an invalid-argument fault and returns `None`
/// if the call cannot run. Returns the number of epoch slots to keep current.
///
/// `elem` is the element size: sizes must be whole elements (V collectives: not zero).
#[inline(always)]
fn check(args: &SnacArgs, ctx: &Context, kind: CollectiveKind, elem: u64) -> Option<u32> {
    let bad_shape = ctx.world == 0
        || ctx.world as usize > MAX_RANKS
        || ctx.rank >= ctx.world
        || args.blocks == 0
        || args.blocks as usize > MAX_BLOCKS
        || args.block >= args.blocks;
    let bad_sizes = if kind.is_v() {
        args.counts.is_null() || elem == 0
    } else {
        !args.bytes.is_multiple_of(elem)
    };
    if bad_shape || bad_sizes {
        if ctx.state != 0 && crate::arch::thread_index() == 0 {
            let _ = Call::detached(ctx, kind, args.block).invalid();
        }
        return None;
    }
    Some(args.coll_blocks.clamp(args.blocks, MAX_BLOCKS as u32))
}

/// This block's share of a local copy (world 1), in whole 16-byte units.
///
/// # Safety
/// Both ranges valid for `len`, not overlapping.
unsafe fn local_copy<A: Atom>(args: &SnacArgs, dst: *mut u8, src: *const u8, len: u64) {
    if core::ptr::eq(dst, src) {
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
unsafe fn local_reduce<A: Atom, R: Reducer>(
    args: &SnacArgs,
    reducer: R,
    dst: *mut u8,
    src: *const u8,
    len: u64,
) {
    let (offset, n) = split_bytes(len as usize, 16, args.blocks as usize, args.block as usize);
    // SAFETY: the share lies inside both ranges, at an element boundary (16-byte units hold
    // whole elements, and so does the tail).
    unsafe {
        reducer.reduce::<A>(
            Coop::block(),
            dst.add(offset),
            &[src.add(offset)],
            n as u64,
            args.smem,
        )
    }
}

/// Runs the throughput regime over `streams` on this block.
///
/// # Safety
/// The streams describe valid buffers; every rank makes the same call.
#[inline(never)]
unsafe fn staged<A: Atom, S: Streams, R: Reducer>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    streams: &S,
    reducer: R,
) {
    // SAFETY: `args.smem` holds `smem_bytes::<A>()` bytes (the entry points' contract).
    let scratch = unsafe { args.smem.add(scratch_offset::<A>() as usize) };
    // SAFETY: `ctx` is valid and `args.block < MAX_BLOCKS` (checked).
    let mut call = unsafe { Call::begin(ctx, kind, args.block, scratch) };
    call.announce_arrival();
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

/// AllReduce: `dst = src₀ ⊕ src₁ ⊕ … ⊕ src_{world-1}` element-wise, `args.bytes / size_of::<T>()`
/// elements on every rank. `src == dst` is allowed.
///
/// # Safety
/// `src` and `dst` are valid for `args.bytes` bytes on this rank, 16-byte aligned (else slower
/// paths run); `ctx` describes the communicator's live buffers; see the module docs for who
/// enters and what every rank must agree on.
#[inline(always)]
pub unsafe fn all_reduce<A: Atom, C: Config, T: Element, O: ReduceOp>(
    args: SnacArgs,
    ctx: Context,
) {
    // SAFETY: forwarded contract.
    unsafe { all_reduce_with::<A, T, _>(&args, &ctx, &C::plan(&args.plan), Static::<O>::NEW) }
}

/// [`all_reduce`] with the operator chosen at run time: the collective is compiled once for
/// `T`, and each reduction picks one of the four operators' datapaths with a `match` (static
/// calls). This is what the host-launched kernels run, their operator being an argument.
///
/// # Safety
/// As [`all_reduce`].
#[inline(always)]
pub unsafe fn all_reduce_op<A: Atom, C: Config, T: Element>(
    args: SnacArgs,
    ctx: Context,
    op: ReduceOpKind,
) {
    // SAFETY: forwarded contract.
    unsafe { all_reduce_with::<A, T, _>(&args, &ctx, &C::plan(&args.plan), op) }
}

/// # Safety
/// As [`all_reduce`].
#[inline(never)]
unsafe fn all_reduce_with<A: Atom, T: Element, P: Operator>(
    args: &SnacArgs,
    ctx: &Context,
    plan: &Plan,
    op: P,
) {
    let kind = CollectiveKind::AllReduce;
    let Some(coll_blocks) = check(args, ctx, kind, core::mem::size_of::<T>() as u64) else {
        return;
    };
    let bytes = args.bytes;
    if bytes == 0 {
        return;
    }
    let reducer = Typed::<T, P>::new(op);
    if ctx.world == 1 {
        // SAFETY: forwarded contract.
        return unsafe { local_reduce::<A, _>(args, reducer, args.dst, args.src, bytes) };
    }
    let algorithm = all_reduce_algorithm(plan, bytes, ctx.world, ctx.latency_window_bytes);
    let b = Buffers {
        me: ctx.rank,
        world: ctx.world,
        src: args.src,
        dst: args.dst,
    };
    match algorithm {
        Algorithm::OneShot | Algorithm::TwoShot => {
            // SAFETY: `args.smem` holds `smem_bytes::<A>()`; `ctx` valid; block checked.
            let mut call = unsafe {
                Call::begin(
                    ctx,
                    kind,
                    args.block,
                    args.smem.add(scratch_offset::<A>() as usize),
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
            unsafe { staged::<A, _, _>(args, ctx, kind, plan, coll_blocks, &streams, reducer) }
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
            unsafe { staged::<A, _, _>(args, ctx, kind, plan, coll_blocks, &streams, reducer) }
        }
    }
}

/// ReduceScatter: rank `r`'s `dst` (`args.bytes` bytes) is the reduction over all ranks of
/// part `r` of their `src` (`world × args.bytes` bytes). `dst` may be part `r` of `src`.
///
/// # Safety
/// As [`all_reduce`], with `src` valid for `world × args.bytes` bytes.
#[inline(always)]
pub unsafe fn reduce_scatter<A: Atom, C: Config, T: Element, O: ReduceOp>(
    args: SnacArgs,
    ctx: Context,
) {
    // SAFETY: forwarded contract.
    unsafe {
        reduce_scatter_with::<A, T, _, false>(&args, &ctx, &C::plan(&args.plan), Static::<O>::NEW)
    }
}

/// [`reduce_scatter`] with the operator chosen at run time (see [`all_reduce_op`]).
///
/// # Safety
/// As [`reduce_scatter`].
#[inline(always)]
pub unsafe fn reduce_scatter_op<A: Atom, C: Config, T: Element>(
    args: SnacArgs,
    ctx: Context,
    op: ReduceOpKind,
) {
    // SAFETY: forwarded contract.
    unsafe { reduce_scatter_with::<A, T, _, false>(&args, &ctx, &C::plan(&args.plan), op) }
}

/// ReduceScatterV: as [`reduce_scatter`] with parts of `counts[q]` elements (`world` counts in
/// memory at `args.counts`, the same on every rank); `src` holds them all in rank order.
///
/// # Safety
/// As [`reduce_scatter`]; `args.counts` valid for `world` values while the call runs.
#[inline(always)]
pub unsafe fn reduce_scatter_v<A: Atom, C: Config, T: Element, O: ReduceOp>(
    args: SnacArgs,
    ctx: Context,
) {
    // SAFETY: forwarded contract.
    unsafe {
        reduce_scatter_with::<A, T, _, true>(&args, &ctx, &C::plan(&args.plan), Static::<O>::NEW)
    }
}

/// [`reduce_scatter_v`] with the operator chosen at run time (see [`all_reduce_op`]).
///
/// # Safety
/// As [`reduce_scatter_v`].
#[inline(always)]
pub unsafe fn reduce_scatter_v_op<A: Atom, C: Config, T: Element>(
    args: SnacArgs,
    ctx: Context,
    op: ReduceOpKind,
) {
    // SAFETY: forwarded contract.
    unsafe { reduce_scatter_with::<A, T, _, true>(&args, &ctx, &C::plan(&args.plan), op) }
}

/// # Safety
/// As [`reduce_scatter`] or [`reduce_scatter_v`].
#[inline(never)]
unsafe fn reduce_scatter_with<A: Atom, T: Element, P: Operator, const V: bool>(
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
    let size = core::mem::size_of::<T>();
    let Some(coll_blocks) = check(args, ctx, kind, size as u64) else {
        return;
    };
    let reducer = Typed::<T, P>::new(op);
    if V {
        let layout = ScatteredV {
            counts: args.counts,
            elem_bytes: size as u32,
        };
        if layout.max_part(ctx.world) != Some(0) {
            // SAFETY: forwarded contract.
            unsafe { scatter::<A, _, _>(args, ctx, kind, plan, coll_blocks, layout, reducer) }
        }
    } else if args.bytes != 0 {
        let layout = Scattered { bytes: args.bytes };
        // SAFETY: forwarded contract.
        unsafe { scatter::<A, _, _>(args, ctx, kind, plan, coll_blocks, layout, reducer) }
    }
}

/// # Safety
/// As [`reduce_scatter`].
#[inline(always)]
unsafe fn scatter<A: Atom, L: Layout, R: Reducer>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    layout: L,
    reducer: R,
) {
    if ctx.world == 1 {
        let (offset, len) = layout.part(0, 0);
        // SAFETY: forwarded contract.
        return unsafe {
            local_reduce::<A, R>(args, reducer, args.dst, args.src.add(offset as usize), len)
        };
    }
    let streams = Scatter {
        b: Buffers {
            me: ctx.rank,
            world: ctx.world,
            src: args.src,
            dst: args.dst,
        },
        src: layout,
    };
    // SAFETY: forwarded contract.
    unsafe { staged::<A, _, R>(args, ctx, kind, plan, coll_blocks, &streams, reducer) }
}

/// AllGather: part `p` of every rank's `dst` (`world × args.bytes` bytes) is rank `p`'s `src`
/// (`args.bytes` bytes). In place (`src` is part `r` of `dst` on rank `r`) is allowed.
///
/// # Safety
/// As [`all_reduce`], with the sizes above.
#[inline(always)]
pub unsafe fn all_gather<A: Atom, C: Config>(args: SnacArgs, ctx: Context) {
    let kind = CollectiveKind::AllGather;
    let Some(coll_blocks) = check(&args, &ctx, kind, 1) else {
        return;
    };
    if args.bytes == 0 {
        return;
    }
    let (src, dst) = (
        Packed { bytes: args.bytes },
        Scattered { bytes: args.bytes },
    );
    // SAFETY: forwarded contract.
    unsafe {
        gather_with::<A, _, _>(
            &args,
            &ctx,
            kind,
            &C::plan(&args.plan),
            coll_blocks,
            src,
            dst,
        )
    }
}

/// AllGatherV: rank `p` contributes `counts[p]` elements of `args.elem_bytes` bytes (`world`
/// counts in memory at `args.counts`, the same on every rank); every `dst` holds all
/// contributions in rank order.
///
/// # Safety
/// As [`all_gather`]; `args.counts` valid for `world` values while the call runs.
#[inline(always)]
pub unsafe fn all_gather_v<A: Atom, C: Config>(args: SnacArgs, ctx: Context) {
    let kind = CollectiveKind::AllGatherV;
    let Some(coll_blocks) = check(&args, &ctx, kind, args.elem_bytes as u64) else {
        return;
    };
    let src = PackedV {
        counts: args.counts,
        elem_bytes: args.elem_bytes,
    };
    let dst = ScatteredV {
        counts: args.counts,
        elem_bytes: args.elem_bytes,
    };
    if dst.max_part(ctx.world) == Some(0) {
        return;
    }
    // SAFETY: forwarded contract.
    unsafe {
        gather_with::<A, _, _>(
            &args,
            &ctx,
            kind,
            &C::plan(&args.plan),
            coll_blocks,
            src,
            dst,
        )
    }
}

/// # Safety
/// As [`all_gather`].
unsafe fn gather_with<A: Atom, S: Layout, D: Layout>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    src: S,
    dst: D,
) {
    let streams = Gather {
        b: Buffers {
            me: ctx.rank,
            world: ctx.world,
            src: args.src,
            dst: args.dst,
        },
        src,
        dst,
    };
    if ctx.world == 1 {
        return local::<A, _>(args, &streams);
    }
    // SAFETY: forwarded contract.
    unsafe { staged::<A, _, _>(args, ctx, kind, plan, coll_blocks, &streams, NoReduce) }
}

/// World 1: run the one local stream (consumer stream 0) over all blocks.
fn local<A: Atom, S: Streams>(args: &SnacArgs, streams: &S) {
    if let Get::Local { src, dst, len } = streams.get(0) {
        // SAFETY: the streams describe the caller's buffers.
        unsafe { local_copy::<A>(args, dst, src, len) }
    }
}

/// AllToAll: part `q` of rank `p`'s `src` becomes part `p` of rank `q`'s `dst` (both
/// `world × args.bytes` bytes). Not in place.
///
/// # Safety
/// As [`all_reduce`], with the sizes above.
#[inline(always)]
pub unsafe fn all_to_all<A: Atom, C: Config>(args: SnacArgs, ctx: Context) {
    let kind = CollectiveKind::AllToAll;
    let Some(coll_blocks) = check(&args, &ctx, kind, 1) else {
        return;
    };
    if args.bytes == 0 {
        return;
    }
    let (src, dst) = (
        Scattered { bytes: args.bytes },
        Transposed { bytes: args.bytes },
    );
    // SAFETY: forwarded contract.
    unsafe {
        exchange_with::<A, _, _>(
            &args,
            &ctx,
            kind,
            &C::plan(&args.plan),
            coll_blocks,
            src,
            dst,
        )
    }
}

/// AllToAllV: `args.counts` holds `2 × world` counts: the elements this rank sends to each
/// rank, then the elements it receives from each rank (what rank `p` sends here must equal
/// what this rank receives from `p`). `src` and `dst` hold the parts in rank order.
///
/// # Safety
/// As [`all_to_all`]; `args.counts` valid for `2 × world` values while the call runs.
#[inline(always)]
pub unsafe fn all_to_all_v<A: Atom, C: Config>(args: SnacArgs, ctx: Context) {
    let kind = CollectiveKind::AllToAllV;
    let Some(coll_blocks) = check(&args, &ctx, kind, args.elem_bytes as u64) else {
        return;
    };
    let src = ScatteredV {
        counts: args.counts,
        elem_bytes: args.elem_bytes,
    };
    // SAFETY: `counts` holds 2 × world values (the contract).
    let dst = TransposedV {
        counts: unsafe { args.counts.add(ctx.world as usize) },
        elem_bytes: args.elem_bytes,
    };
    // SAFETY: forwarded contract.
    unsafe {
        exchange_with::<A, _, _>(
            &args,
            &ctx,
            kind,
            &C::plan(&args.plan),
            coll_blocks,
            src,
            dst,
        )
    }
}

/// # Safety
/// As [`all_to_all`].
unsafe fn exchange_with<A: Atom, S: Layout, D: Layout>(
    args: &SnacArgs,
    ctx: &Context,
    kind: CollectiveKind,
    plan: &Plan,
    coll_blocks: u32,
    src: S,
    dst: D,
) {
    let streams = Exchange {
        b: Buffers {
            me: ctx.rank,
            world: ctx.world,
            src: args.src,
            dst: args.dst,
        },
        src,
        dst,
    };
    if ctx.world == 1 {
        return local::<A, _>(args, &streams);
    }
    // SAFETY: forwarded contract.
    unsafe { staged::<A, _, _>(args, ctx, kind, plan, coll_blocks, &streams, NoReduce) }
}
