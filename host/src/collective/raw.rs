//! The collectives on raw device ranges (`Span`s): the size, buffer and aliasing checks every
//! call passes before anything is launched. `unsafe`: the ranges must stay valid until the
//! call has run.

use super::*;

/// How many parts of `count` elements a collective of fixed parts reads and writes per rank:
/// (in `src`, in `dst`).
fn parts(kind: CollectiveKind, world: u32) -> (u32, u32) {
    match kind {
        CollectiveKind::AllGather => (1, world),
        CollectiveKind::ReduceScatter => (world, 1),
        CollectiveKind::AllToAll => (world, world),
        _ => (1, 1),
    }
}

/// What sizes a call: the fixed forms' element count per part, or the V forms' counts in
/// device memory.
enum Size {
    Count(u64),
    Counts(Counts),
}

impl From<u64> for Size {
    fn from(count: u64) -> Self {
        Size::Count(count)
    }
}

impl From<Counts> for Size {
    fn from(counts: Counts) -> Self {
        Size::Counts(counts)
    }
}

/// Checks a call ([`fixed_call`] or [`v_call`]) and launches it.
///
/// # Safety
/// As [`all_reduce_raw`] (and [`all_gather_v_raw`] for counts).
#[allow(clippy::too_many_arguments)]
unsafe fn checked_launch(
    ctx: &Context,
    kind: CollectiveKind,
    dtype: DataType,
    op: Option<ReduceOpKind>,
    dst: Span,
    src: Span,
    size: Size,
    options: &Options,
) -> Result<()> {
    let (call, band_bytes) = match size {
        Size::Count(count) => fixed_call(ctx, kind, dtype, dst, src, count, op)?,
        Size::Counts(counts) => v_call(ctx, kind, dtype, dst, src, counts, op)?,
    };
    // SAFETY: forwarded contract.
    unsafe { ctx.launch_call(call, options, band_bytes) }
}

/// Checks a collective of fixed-size parts (see [`parts`]) of `count` elements: the call and
/// its size in bytes.
fn fixed_call(
    ctx: &Context,
    kind: CollectiveKind,
    dtype: DataType,
    dst: Span,
    src: Span,
    count: u64,
    op: Option<ReduceOpKind>,
) -> Result<(Call, u64)> {
    let parts = parts(kind, ctx.world());
    let bytes = validate::elements_to_bytes("count", count, dtype.size())?;
    let src_bytes = validate::parts_to_bytes("src", bytes, parts.0)?;
    let dst_bytes = validate::parts_to_bytes("dst", bytes, parts.1)?;
    validate::check_buffer("src", src, src_bytes, 16)?;
    validate::check_buffer("dst", dst, dst_bytes, 16)?;
    let part_r = bytes.saturating_mul(ctx.rank() as u64);
    let rule = match kind {
        CollectiveKind::AllReduce => validate::Aliasing::SameOrDisjoint,
        CollectiveKind::AllGather => validate::Aliasing::InputIsPartOfOutput { offset: part_r },
        CollectiveKind::ReduceScatter => validate::Aliasing::OutputIsPartOfInput { offset: part_r },
        _ => validate::Aliasing::Disjoint,
    };
    validate::check_aliasing(src, src_bytes, dst, dst_bytes, rule)?;
    let mut args = args(dst, src, bytes).bounded(src.bytes, dst.bytes, u64::MAX);
    ctx.symmetric_buffers()
        .mark(kind, src, dst, part_r, &mut args);
    let call = Call {
        kind,
        dtype,
        args,
        op,
    };
    Ok((call, bytes))
}

fn args(dst: Span, src: Span, bytes: u64) -> SnacArgs {
    SnacArgs::new(dst.addr as *mut u8, src.addr as *const u8, bytes, 1)
}

/// Declares a collective's raw entry point, which checks its arguments and launches
/// ([`checked_launch`]); `$size` is the fixed forms' `count` or the V forms' `counts`.
/// `(op)` after the name makes it a reduction, taking the operator after the type; `()` a copy.
macro_rules! raw_collective {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($op:ident)?) = $kind:ident, sized by $size:ident: $size_ty:ty;
    )*) => {$(
        $(#[$doc])*
        pub unsafe fn $name(
            ctx: &Context,
            dtype: DataType,
            $($op: ReduceOpKind,)?
            dst: Span,
            src: Span,
            $size: $size_ty,
            options: &Options,
        ) -> Result<()> {
            let op: Option<ReduceOpKind> = None $(.or(Some($op)))?;
            let kind = CollectiveKind::$kind;
            // SAFETY: forwarded contract.
            unsafe { checked_launch(ctx, kind, dtype, op, dst, src, $size.into(), options) }
        }
    )*};
}

raw_collective! {
    /// `dst = src₀ ⊕ … ⊕ src_{world-1}` over `count` elements of `dtype` on every rank (raw
    /// device addresses; `src == dst` is allowed).
    ///
    /// # Safety
    /// `src` and `dst` are device memory of the context's GPU, valid for their spans until the
    /// collective has run on the context's stream.
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: purlin::memory::Span, dst: purlin::memory::Span) -> purlin::Result<()> {
    /// use purlin::collective::{all_reduce_raw, Options};
    /// // SAFETY: both spans are live device buffers of the context's GPU.
    /// unsafe { all_reduce_raw(ctx, purlin::DataType::Bf16, purlin::ReduceOpKind::Sum, dst, src, 4096, &Options::default())? };
    /// # Ok(()) }
    /// ```
    fn all_reduce_raw(op) = AllReduce, sized by count: u64;

    /// Rank `r`'s `count` elements (`src`) land at `dst[r × count ..]` on every rank.
    ///
    /// # Safety
    /// As [`all_reduce_raw`]; `dst` holds `world × count` elements.
    fn all_gather_raw() = AllGather, sized by count: u64;

    /// Rank `r` receives the reduction over ranks of part `r` (`count` elements) of every `src`
    /// (`world × count` elements).
    ///
    /// # Safety
    /// As [`all_reduce_raw`]; `src` holds `world × count` elements, `dst` `count`.
    fn reduce_scatter_raw(op) = ReduceScatter, sized by count: u64;

    /// Part `p` (`count` elements) of rank `r`'s `src` lands in part `r` of rank `p`'s `dst`.
    ///
    /// # Safety
    /// As [`all_reduce_raw`]; `src` and `dst` hold `world × count` elements.
    fn all_to_all_raw() = AllToAll, sized by count: u64;
}

/// The V collectives' counts: element counts in device memory (`u64` each), read by the kernel
/// when it runs, so a captured graph replays with whatever they hold then. `max_count` bounds
/// every count (it picks the tuning band); the buffers must hold what the counts describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Device address of the counts (`world` of them; `2 × world` for AllToAllV).
    pub addr: u64,
    /// The largest count any entry may hold.
    pub max_count: u64,
}

fn v_call(
    ctx: &Context,
    kind: CollectiveKind,
    dtype: DataType,
    dst: Span,
    src: Span,
    counts: Counts,
    op: Option<ReduceOpKind>,
) -> Result<(Call, u64)> {
    validate::check_pointer("counts", counts.addr, 8)?;
    let max_bytes = validate::elements_to_bytes("max_count", counts.max_count, dtype.size())?;
    // The counts live on the device, which checks them against `max_count` and against both
    // buffers' capacities (passed below) before anything moves; here every buffer must be a
    // live, aligned address, whatever the counts.
    validate::check_pointer("src", src.addr, 16)?;
    validate::check_pointer("dst", dst.addr, 16)?;
    let rule = match kind {
        CollectiveKind::AllGatherV => validate::Aliasing::Inside {
            input_in_output: true,
        },
        CollectiveKind::ReduceScatterV => validate::Aliasing::Inside {
            input_in_output: false,
        },
        _ => validate::Aliasing::Disjoint,
    };
    validate::check_aliasing(src, src.bytes, dst, dst.bytes, rule)?;
    let mut a = args(dst, src, 0).bounded(src.bytes, dst.bytes, counts.max_count);
    a.counts = counts.addr as *const u64;
    a.elem_bytes = dtype.size() as u32;
    ctx.symmetric_buffers().mark(kind, src, dst, 0, &mut a);
    Ok((
        Call {
            kind,
            dtype,
            args: a,
            op,
        },
        max_bytes,
    ))
}

raw_collective! {
    /// AllGatherV: rank `p` contributes `counts[p]` elements; every `dst` holds all
    /// contributions in rank order.
    ///
    /// # Safety
    /// As [`all_reduce_raw`]; `counts` holds `world` counts (the same on every rank) and the
    /// buffers hold what they describe, while the call runs.
    fn all_gather_v_raw() = AllGatherV, sized by counts: Counts;

    /// ReduceScatterV: rank `r` receives the reduction of part `r` (`counts[r]` elements) of
    /// every `src`, whose parts lie in rank order.
    ///
    /// # Safety
    /// As [`all_gather_v_raw`].
    fn reduce_scatter_v_raw(op) = ReduceScatterV, sized by counts: Counts;

    /// AllToAllV: `counts` holds `2 × world` counts: the elements this rank sends to each rank,
    /// then the elements it receives from each rank.
    ///
    /// # Safety
    /// As [`all_gather_v_raw`], with `2 × world` counts.
    fn all_to_all_v_raw() = AllToAllV, sized by counts: Counts;
}
