//! The collectives on raw device ranges (`Span`s): the size, buffer and aliasing checks every
//! call passes before anything is launched. `unsafe`: the ranges must stay valid until the
//! call has run.

use super::*;
use purlin_device::collective::Extent;
use purlin_device::snac::PeersReach;

/// How many parts of `count` elements a collective of fixed parts reads and writes per rank:
/// (in `src`, in `dst`).
fn parts(kind: CollectiveKind, world: u32) -> (u32, u32) {
    let s = kind.semantics();
    let n = |e: Extent| match e {
        Extent::Own => 1,
        Extent::All => world,
    };
    (n(s.src), n(s.dst))
}

/// What sizes a call: the fixed-size forms' element count per part, or the V forms' counts in
/// device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Elements per part (fixed-size collectives).
    Count(u64),
    /// Counts in device memory (V collectives).
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

/// Any collective on raw device ranges, chosen at run time: what each `*_raw` function is for
/// its own collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawCall {
    /// Which collective.
    pub kind: CollectiveKind,
    /// Element type.
    pub dtype: DataType,
    /// The operator: given for a reduction, and only for one.
    pub op: Option<ReduceOpKind>,
    /// This rank's output.
    pub dst: Span,
    /// This rank's input.
    pub src: Span,
    /// A count for a fixed-size collective, counts for a V form.
    pub size: Size,
}

/// Checks `call` as its collective's `*_raw` function does (and that its operator and size
/// are the collective's kind) and launches it.
///
/// # Safety
/// As [`all_reduce_raw`] (and [`all_gather_v_raw`] for counts).
///
/// ```no_run
/// # fn demo(ctx: &purlin::Context, src: purlin::memory::Span, dst: purlin::memory::Span) -> purlin::Result<()> {
/// use purlin::collective::{launch_raw, CollectiveKind, Options, RawCall, Size};
/// let call = RawCall {
///     kind: CollectiveKind::AllGather, dtype: purlin::DataType::Bf16, op: None,
///     dst, src, size: Size::Count(4096),
/// };
/// // SAFETY: both spans are live device buffers of the context's GPU.
/// unsafe { launch_raw(ctx, &call, &Options::default())? };
/// # Ok(()) }
/// ```
pub unsafe fn launch_raw(ctx: &Context, call: &RawCall, options: &Options) -> Result<()> {
    let RawCall {
        kind,
        dtype,
        op,
        dst,
        src,
        size,
    } = *call;
    let not_its = |what, reason: &str| {
        Err(Error::InvalidArgument {
            what,
            reason: format!("{} {reason}", kind.name()),
        })
    };
    if kind.reduces() != op.is_some() {
        let needs = if kind.reduces() { "needs" } else { "takes no" };
        return not_its("op", &format!("{needs} an operator"));
    }
    let (mut call, band_bytes) = match size {
        Size::Count(count) if !kind.is_v() => fixed_call(ctx, kind, dtype, dst, src, count, op)?,
        Size::Counts(counts) if kind.is_v() => v_call(ctx, kind, dtype, dst, src, counts, op)?,
        _ => {
            let by = if kind.is_v() { "counts" } else { "a count" };
            return not_its("size", &format!("is sized by {by}"));
        }
    };
    let moved = match size {
        Size::Count(_) => {
            let (src_parts, dst_parts) = parts(kind, ctx.world());
            Some(band_bytes.saturating_mul(src_parts.max(dst_parts) as u64))
        }
        Size::Counts(_) => None,
    };
    call.args.peers_reach = peers_reach(ctx, kind, moved, &call.args, options);
    call.args.direct_min_bytes = if options.direct {
        0
    } else {
        v_direct_min_bytes(kind)
    };
    let options = &all_reduce_options(kind, ctx.world(), moved, &call.args, options);
    // SAFETY: forwarded contract.
    unsafe { ctx.launch_call(call, options, band_bytes) }
}

/// The options an AllReduce of `moved` bytes on `world` ranks runs with: where the peers
/// reach its buffers (ordinary ones a pass reaches, [`peers_reach`], or symmetric ones) and the
/// call is large enough ([`all_reduce_pass_from`]), it takes the throughput regime, which runs
/// one pass over them, even below the plan's latency threshold; an algorithm the caller forced
/// stays. The same on every rank that passes the same options, count and kind of buffer.
fn all_reduce_options(
    kind: CollectiveKind,
    world: u32,
    moved: Option<u64>,
    args: &SnacArgs,
    options: &Options,
) -> Options {
    let symmetric = !args.src_peers.is_null() && !args.dst_peers.is_null();
    let reached = args.peers_reach == PeersReach::Reachable || symmetric;
    let pass = matches!(kind, CollectiveKind::AllReduce)
        && options.algorithm.is_none()
        && reached
        && moved.is_some_and(|m| m >= all_reduce_pass_from(world));
    Options {
        algorithm: if pass {
            Some(Algorithm::Throughput)
        } else {
            options.algorithm
        },
        ..*options
    }
}

/// The size from which AllReduce's one pass beats its two-shot packets: 8 MiB / `world` (1 MiB
/// at 8 ranks, 2 MiB at 4, 4 MiB at 2). Measured on an H100, all ranks in one graph
/// (`benches/RESULTS.md`), ordinary buffers then symmetric ones: at 8 ranks the pass took 33.5
/// and 27.2 µs at 1 MiB against two-shot's 42.8 (it lost at 512 KiB); at 4 ranks 34.8 and 26.0
/// µs at 2 MiB against 40.1 (it lost at 1 MiB); at 2 ranks two-shot was as fast or faster up to
/// its 2 MiB threshold.
const fn all_reduce_pass_from(world: u32) -> u64 {
    (8 << 20) / if world == 0 { 1 } else { world as u64 }
}

/// What a call says of its ordinary buffers' reach: reachable when every rank of the context
/// shares this process and its GPU (or host memory), neither buffer is a symmetric one and
/// the call is large enough for the one pass to pay ([`direct_pays`]) or the caller asks for
/// it (`Options::direct`), unless the caller asks to stage. The same on every rank that passes the same options (the count, which `moved`
/// comes from, is compared by the call's digest).
fn peers_reach(
    ctx: &Context,
    kind: CollectiveKind,
    moved: Option<u64>,
    args: &SnacArgs,
    options: &Options,
) -> PeersReach {
    let ordinary = args.src_peers.is_null() && args.dst_peers.is_null();
    let pays = options.direct || direct_pays(kind, ctx.world(), moved);
    if ordinary && !options.staged && pays && ctx.shares_address_space() {
        PeersReach::Reachable
    } else {
        PeersReach::None
    }
}

/// Whether a fixed-size call moving `moved` bytes per rank (its larger buffer: nccl-tests'
/// size) on `world` ranks runs faster in one pass over the peers' buffers than staged, from
/// where the pass first won on an H100 (one graph for every rank's calls; below, the pass's
/// entry exchange and exit meeting cost up to 9 µs more than staging; `benches/RESULTS.md`):
/// - AllGather from 8 MiB, AllToAll from 2 MiB (at 8 ranks);
/// - ReduceScatter from 1 MiB on 3 ranks or more, 2 MiB on 2 (at 1 MiB the pass beat staging
///   by 2.1-2.8 µs at 4 ranks, tied at 3 and lost by 1.6-2.2 at 2; at 3 ranks a bench size of
///   2 MiB, whose parts round down to just under it, staged in 32.2 µs against the pass's
///   25.5; at 8 ranks a call of 1 MiB runs the packets);
/// - AllReduce from 1 MiB (its pass beat staging from 128 KiB at 4 and 8 ranks and from 1 MiB
///   at 2; where it also beats the two-shot packets, [`all_reduce_pass_from`], it replaces
///   them).
///
/// The V forms (`moved` unknown: their counts are on the device and each rank's bound is its
/// own) always take the pass.
fn direct_pays(kind: CollectiveKind, world: u32, moved: Option<u64>) -> bool {
    const MIB: u64 = 1 << 20;
    let Some(moved) = moved else {
        return true;
    };
    let from = match kind {
        CollectiveKind::AllReduce => MIB,
        CollectiveKind::AllGather => 8 * MIB,
        CollectiveKind::ReduceScatter if world >= 3 => MIB,
        _ => 2 * MIB,
    };
    moved >= from
}

/// Where a V call over ordinary buffers the peers reach starts to take the one pass rather
/// than staging (`SnacArgs::direct_min_bytes`: the device decides, from the counts every rank
/// agrees on), counting every rank's part (AllGatherV's whole gathered output,
/// ReduceScatterV's whole reduced input): between the last size where the pass lost and the
/// first where it won on an H100 with 8 ranks in one graph (`benches/RESULTS.md`: AllGatherV
/// lost at 4 MiB and won at 8, ReduceScatterV lost at 512 KiB and won at 1 MiB; the bench's
/// linear split sums to just under its size, so a threshold at the size itself missed it).
/// AllToAllV's pass won at every size above its packet path: 0. The fixed-size forms: 0 (the
/// host decided, [`direct_pays`]).
fn v_direct_min_bytes(kind: CollectiveKind) -> u64 {
    const KIB: u64 = 1 << 10;
    match kind {
        CollectiveKind::AllGatherV => 6 * 1024 * KIB,
        CollectiveKind::ReduceScatterV => 768 * KIB,
        _ => 0,
    }
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
) -> Result<(Checked, u64)> {
    let parts = parts(kind, ctx.world());
    let bytes = validate::elements_to_bytes("count", count, dtype.size())?;
    let src_bytes = validate::parts_to_bytes("src", bytes, parts.0)?;
    let dst_bytes = validate::parts_to_bytes("dst", bytes, parts.1)?;
    validate::check_buffer("src", src, src_bytes, 16)?;
    validate::check_buffer("dst", dst, dst_bytes, 16)?;
    let part_r = bytes.saturating_mul(ctx.rank() as u64);
    let rule = validate::Aliasing::of(kind.semantics().in_place, Some(part_r));
    validate::check_aliasing(src, src_bytes, dst, dst_bytes, rule)?;
    let mut args = args(dst, src, bytes).bounded(src.bytes, dst.bytes, u64::MAX);
    ctx.symmetric_buffers().mark(kind, src, dst, &mut args);
    let call = Checked {
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
/// ([`launch_raw`]); `$size` is the fixed forms' `count` or the V forms' `counts`.
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
            let call = $crate::collective::RawCall {
                kind: CollectiveKind::$kind,
                dtype,
                op: None $(.or(Some($op)))?,
                dst,
                src,
                size: $size.into(),
            };
            // SAFETY: forwarded contract.
            unsafe { $crate::collective::launch_raw(ctx, &call, options) }
        }
    )*};
}
pub(super) use raw_collective;

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
) -> Result<(Checked, u64)> {
    validate::check_pointer("counts", counts.addr, 8)?;
    let max_bytes = validate::elements_to_bytes("max_count", counts.max_count, dtype.size())?;
    // The counts live on the device, which checks them against `max_count` and against both
    // buffers' capacities (passed below) before anything moves; here every buffer must be a
    // live, aligned address, whatever the counts.
    validate::check_pointer("src", src.addr, 16)?;
    validate::check_pointer("dst", dst.addr, 16)?;
    let rule = validate::Aliasing::of(kind.semantics().in_place, None);
    validate::check_aliasing(src, src.bytes, dst, dst.bytes, rule)?;
    let mut a = args(dst, src, 0).bounded(src.bytes, dst.bytes, counts.max_count);
    a.counts = counts.addr as *const u64;
    a.elem_bytes = dtype.size() as u32;
    ctx.symmetric_buffers().mark(kind, src, dst, &mut a);
    Ok((
        Checked {
            kind,
            dtype,
            args: a,
            op,
        },
        max_bytes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// The algorithm an AllReduce-or-other call of `moved` bytes on `world` ranks gets.
    fn algorithm(
        kind: CollectiveKind,
        world: u32,
        moved: u64,
        a: &SnacArgs,
        o: &Options,
    ) -> Option<Algorithm> {
        all_reduce_options(kind, world, Some(moved), a, o).algorithm
    }

    fn ordinary(reach: PeersReach) -> SnacArgs {
        SnacArgs {
            peers_reach: reach,
            ..SnacArgs::new(core::ptr::null_mut(), core::ptr::null(), 0, 1)
        }
    }

    #[test]
    fn the_pass_pays_from_the_sizes_measured_per_collective_and_world() {
        use CollectiveKind::*;
        for (kind, world, from) in [
            (AllReduce, 8, MIB),
            (AllReduce, 2, MIB),
            (AllGather, 8, 8 * MIB),
            (AllGather, 2, 8 * MIB),
            (ReduceScatter, 8, MIB),
            (ReduceScatter, 4, MIB),
            (ReduceScatter, 3, MIB),
            (ReduceScatter, 2, 2 * MIB),
            (AllToAll, 8, 2 * MIB),
            (AllToAll, 4, 2 * MIB),
        ] {
            assert!(direct_pays(kind, world, Some(from)), "{kind:?} w{world}");
            assert!(
                !direct_pays(kind, world, Some(from - 16)),
                "{kind:?} w{world}"
            );
        }
        // The V forms: the device decides.
        assert!(direct_pays(AllGatherV, 8, None));
    }

    #[test]
    fn all_reduce_takes_the_pass_where_it_pays_and_reaches() {
        let auto = Options::default();
        let pass = Some(Algorithm::Throughput);
        let reached = ordinary(PeersReach::Reachable);
        let ar = CollectiveKind::AllReduce;
        for (world, from) in [(8, MIB), (4, 2 * MIB), (2, 4 * MIB), (3, (8 * MIB) / 3)] {
            assert_eq!(
                algorithm(ar, world, from, &reached, &auto),
                pass,
                "world {world}"
            );
            assert_eq!(
                algorithm(ar, world, 64 * MIB, &reached, &auto),
                pass,
                "world {world}"
            );
            assert_eq!(
                algorithm(ar, world, from - 16, &reached, &auto),
                None,
                "world {world}"
            );
        }
        // Out of reach (staged, several processes), the plan still chooses...
        assert_eq!(
            algorithm(ar, 8, MIB, &ordinary(PeersReach::None), &auto),
            None
        );
        // ...unless both buffers are symmetric (one table alone is refused by any pass).
        let table = [0u64; 8];
        let symmetric = SnacArgs {
            src_peers: table.as_ptr(),
            dst_peers: table.as_ptr(),
            ..ordinary(PeersReach::None)
        };
        assert_eq!(algorithm(ar, 8, MIB, &symmetric, &auto), pass);
        let half = SnacArgs {
            dst_peers: core::ptr::null(),
            ..symmetric
        };
        assert_eq!(algorithm(ar, 8, MIB, &half, &auto), None);
        // Only AllReduce reads the algorithm; a forced one stays.
        assert_eq!(
            algorithm(CollectiveKind::AllGather, 8, 64 * MIB, &reached, &auto),
            None
        );
        let two = Options {
            algorithm: Some(Algorithm::TwoShot),
            ..auto
        };
        assert_eq!(
            algorithm(ar, 8, MIB, &reached, &two),
            Some(Algorithm::TwoShot)
        );
        // Everything else passes through.
        let traced = Options {
            trace: true,
            direct: true,
            ..auto
        };
        assert_eq!(
            all_reduce_options(ar, 8, Some(MIB), &reached, &traced),
            Options {
                algorithm: pass,
                ..traced
            }
        );
    }
}
