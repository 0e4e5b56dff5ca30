//! Host-launched collectives: AllReduce, AllGather, ReduceScatter, AllToAll and their V forms,
//! each one kernel on the context's stream. Nothing is synchronised and no host state changes,
//! so a sequence of calls can be captured into a CUDA graph and replayed; the V collectives read
//! their counts from device memory, so a replay can use new counts.
//!
//! Every rank of the communicator makes the same calls in the same order (same collective,
//! type, operator, counts and options). Arguments are checked before anything is launched.
//! The launch shape and plan come from the codesign table of `purlin-tuning` (the compiled-in
//! one, or the file named by `PURLIN_TUNING`), unless [`Options`] fixes them.
//!
//! # In place and overlap
//!
//! | collective | input and output may |
//! | --- | --- |
//! | AllReduce | be the same buffer (`src == dst`) |
//! | AllGather, AllGatherV | be in place: the input is this rank's part of the output |
//! | ReduceScatter, ReduceScatterV | be in place: the output is this rank's part of the input |
//! | AllToAll, AllToAllV | not overlap at all |
//!
//! Any other overlap is refused: by the host for the fixed-size collectives
//! ([`Error::InvalidArgument`]), and for the V forms, whose part offsets live on the device, by
//! the kernel ([`Error::Refused`]) before anything moves.
//!
//! # Host calls that wait for the GPU
//!
//! Collectives may be queued back to back on every rank's stream, sizes, kinds and options
//! changing from call to call, with one synchronise at the end (`tests/gpu/queued.rs` checks
//! random mixed sequences so on the virtual node). What a rank's *host thread* does between
//! its launches matters when ranks share a process ([`InProcess`](crate::bootstrap::InProcess)):
//! a collective kernel waits for its peers' kernels of the same call, so a host call that
//! blocks until the GPU has made progress, made before this rank launched its part of a
//! queued call, can end up waiting for itself. Measured on an H200 with ranks as threads on one
//! GPU: pageable host-to-device copies (cudarc's `clone_htod` or `memcpy_htod` of a `Vec` or
//! slice) interleaved with queued collectives blocked every rank's host thread until the
//! peers' kernels gave up ([`Error::Timeout`] after the context's timeout), while the same
//! sequences with the copies from page-locked memory (`CudaContext::alloc_pinned`), or with the
//! inputs uploaded before the first call, ran through. Anything that waits for the device to
//! go idle does the same (`scripts/probe-blocking.py` measures which calls do): a synchronous
//! `cuMemFree` or `cuMemFreeHost`, loading a module, a stream or device synchronisation, and a
//! launch that needs more per-thread local memory than the context holds (which is why
//! [`Gpu::open`](crate::Gpu::open) and module loads reserve what their kernels need);
//! stream-ordered allocation (`cuMemAllocAsync`), `cuMemAlloc`, `cuMemHostAlloc` and stream or
//! event creation did not wait. Make such calls before or after a queued sequence, or use
//! page-locked memory.
//!
//! ```no_run
//! use purlin::bootstrap::{Bootstrap, InProcess};
//! use purlin::memory::DeviceAllocator;
//! use purlin::workspace::{Workspace, WorkspaceRequirements};
//! use purlin::{Context, ReduceOpKind};
//! // An AllReduce of 1 Mi f32 over four ranks on GPU 0 (the virtual node).
//! let gpu = purlin::Gpu::open(0)?;
//! std::thread::scope(|s| -> purlin::Result<()> {
//!     for b in InProcess::group(4)? {
//!         let gpu = gpu.clone();
//!         s.spawn(move || -> purlin::Result<()> {
//!             let stream = gpu.new_stream()?;
//!             let ws = Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?;
//!             let ctx = Context::new(b.rank(), b.world(), ws, &stream)?;
//!             let src = stream.clone_htod(&vec![1.0f32; 1 << 20])?;
//!             let mut dst = stream.alloc_zeros::<f32>(1 << 20)?;
//!             purlin::all_reduce(&ctx, &src, &mut dst, 1 << 20, ReduceOpKind::Sum)?;
//!             ctx.synchronize()?;
//!             assert!(stream.clone_dtoh(&dst)?.iter().all(|&x| x == 4.0));
//!             ctx.finalize()
//!         });
//!     }
//!     Ok(())
//! })?;
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::context::Context;
use crate::error::{Error, Result};
use crate::kernels::kernel_name;
pub use crate::kernels::{atom_threads, kernel_shape};
pub use crate::launch::check_fused_shape;
use crate::launch::{Kernel, KernelArg, LaunchShape};
use crate::memory::Span;
use crate::validate;
use cudarc::driver::{DevicePtr, DevicePtrMut};
use purlin_device::context::MAX_BLOCKS;
use purlin_device::element::{DataType, Element};
use purlin_device::op::ReduceOpKind;
use purlin_device::snac::SnacArgs;
use purlin_tuning::{Choice, Row, Table};
use std::sync::OnceLock;

pub use purlin_device::snac::{Algorithm, CollectiveKind, Plan, ReductionMode};

// SAFETY: `SnacArgs` is `#[repr(C)]` plain data (addresses, sizes, the plan), laid out
// identically on the 64-bit host and on nvptx64.
unsafe impl KernelArg for SnacArgs {}

/// Per-call choices beyond the arguments. `Default`: the default reduction mode and the
/// codesign table's launch shape and plan.
///
/// ```
/// use purlin::collective::{Algorithm, Options, ReductionMode};
/// let o = Options { mode: ReductionMode::Deterministic, algorithm: Some(Algorithm::TwoShot), ..Default::default() };
/// assert!(o.choice.is_none());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Reduction mode (bitwise repeatable with [`ReductionMode::Deterministic`]).
    pub mode: ReductionMode,
    /// Force an AllReduce algorithm instead of the plan's.
    pub algorithm: Option<Algorithm>,
    /// Use this launch shape and plan instead of the table's (the mode and algorithm above still
    /// apply).
    pub choice: Option<Choice>,
}

/// The codesign table in use: the file named by `PURLIN_TUNING` (read once) in front of the
/// compiled-in rows. A file that cannot be read or parsed is an error, here and at every call
/// that needs a plan (nothing is silently ignored).
///
/// ```
/// let table = purlin::collective::table()?;
/// assert!(!table.rows().is_empty());
/// # Ok::<(), purlin::Error>(())
/// ```
pub fn table() -> Result<Table<'static>> {
    static ROWS: OnceLock<std::result::Result<Vec<Row>, String>> = OnceLock::new();
    let rows = ROWS.get_or_init(|| {
        let mut rows = Vec::new();
        if let Some(path) = std::env::var_os("PURLIN_TUNING") {
            let shown = path.to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).map_err(|e| format!("{shown}: {e}"))?;
            rows = Table::parse(&text).map_err(|e| format!("{shown}: {e}"))?;
            tracing::info!(path = %shown, rows = rows.len(), "loaded tuning table");
        }
        Ok(merge(rows, Table::builtin().rows()))
    });
    match rows {
        Ok(rows) => Ok(Table::new(rows)),
        Err(reason) => Err(Error::InvalidArgument {
            what: "PURLIN_TUNING",
            reason: reason.clone(),
        }),
    }
}

/// A loaded table's rows in front of the compiled-in ones: rows of the file win over
/// compiled-in rows of the same (architecture, world, collective), every band of them; the
/// compiled-in keys the file lacks keep all their bands.
fn merge(loaded: Vec<Row>, builtin: &[Row]) -> Vec<Row> {
    let same_key =
        |a: &Row, b: &Row| a.arch == b.arch && a.world == b.world && a.collective == b.collective;
    let kept: Vec<Row> = builtin
        .iter()
        .filter(|r| !loaded.iter().any(|l| same_key(l, r)))
        .copied()
        .collect();
    let mut rows = loaded;
    rows.extend(kept);
    rows
}

/// A launch shape and plan that cannot run is refused with the reason (a table row or an
/// `Options::choice`): blocks outside `1..=MAX_BLOCKS`, no chunk, thresholds that do not fit.
fn check_choice(choice: &Choice, kind: CollectiveKind, bytes: u64) -> Result<()> {
    let refuse = |reason: String| {
        Err(Error::InvalidArgument {
            what: "plan",
            reason: format!("{} of {bytes} bytes: {reason}", kind.name()),
        })
    };
    if choice.blocks == 0 || choice.blocks as usize > MAX_BLOCKS {
        return refuse(format!(
            "{} blocks is not in 1..={MAX_BLOCKS}",
            choice.blocks
        ));
    }
    if choice.plan.chunk_bytes < 16 {
        return refuse(format!(
            "a chunk of {} bytes holds no 16-byte unit",
            choice.plan.chunk_bytes
        ));
    }
    if choice.plan.put_blocks == 0 {
        return refuse("no producer blocks".into());
    }
    Ok(())
}

/// One call, checked and ready to launch.
struct Call {
    kind: CollectiveKind,
    dtype: DataType,
    args: SnacArgs,
    op: Option<ReduceOpKind>,
}

impl Context {
    /// The launch shape and plan of a collective call of dispatch size `bytes` (see
    /// `purlin-tuning`): the table's (or the options'), with the mode and algorithm applied,
    /// and the blocks capped so that the blocks of every rank sharing the GPU are resident at
    /// once; a call that runs a latency path ([`purlin_device::collective::lean`]) gets SNAC's
    /// scratch only as shared memory and fewer blocks. Host-launched collectives use it; use
    /// it too for a kernel of yours that calls a collective (put the plan in `SnacArgs::plan`,
    /// launch `shape.blocks` blocks with at least `shape.smem_bytes` of dynamic shared memory
    /// at `SnacArgs::smem`: the collective sees how much it got and runs only the paths that
    /// fit).
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context) -> purlin::Result<()> {
    /// use purlin::collective::{CollectiveKind, Options};
    /// let (shape, plan) = ctx.plan(CollectiveKind::AllGather, 1 << 20, &Options::default())?;
    /// assert!(shape.blocks >= 1 && plan.chunk_bytes > 0);
    /// # Ok(()) }
    /// ```
    pub fn plan(
        &self,
        kind: CollectiveKind,
        bytes: u64,
        options: &Options,
    ) -> Result<(LaunchShape, Plan)> {
        let gpu = self.gpu().ok_or_else(host_context)?;
        let choice = match options.choice {
            Some(c) => c,
            None => table()?.lookup(gpu.compute_capability(), self.world(), kind, bytes),
        };
        check_choice(&choice, kind, bytes)?;
        let mut plan = choice.plan;
        plan.mode = options.mode as u32;
        if let Some(a) = options.algorithm {
            plan.algorithm = a as u32;
        }
        let (threads, smem) = kernel_shape(gpu.arch());
        plan.threads = threads;
        // Blocks wait for each other across ranks: all of them must be resident at once. The
        // collective kernels hold one block per SM (see purlin-kernels).
        let resident = (gpu.sm_count() / self.workspace().ranks_on_this_gpu().max(1)).max(1);
        let mut shape = LaunchShape {
            blocks: choice.blocks.min(resident),
            threads,
            smem_bytes: smem,
        };
        // A call whose path needs none of the Atom's shared memory (packets, a register copy
        // at world 1) launches with SNAC's scratch only and as many blocks as its bytes need:
        // a smaller launch starts sooner. The device takes the same decision from the same
        // arguments (`SnacArgs::smem_bytes` tells it what it got).
        if self.is_lean(kind, bytes, &plan) {
            shape.smem_bytes = purlin_device::snac::SNAC_SMEM_BYTES;
            shape.blocks =
                purlin_device::collective::lean_blocks(self.world(), bytes, threads, shape.blocks);
        }
        Ok((shape, plan))
    }

    /// Whether a call of dispatch size `bytes` with `plan` runs a latency path (the device's
    /// decision, from the same arguments).
    fn is_lean(&self, kind: CollectiveKind, bytes: u64, plan: &Plan) -> bool {
        let window = self.workspace().requirements().latency_window_bytes;
        purlin_device::collective::lean(kind, self.world(), bytes, plan, window)
    }

    /// Launches a checked call.
    ///
    /// # Safety
    /// The buffers in `call.args` are valid for the call and stay so until it has run.
    unsafe fn launch_call(&self, mut call: Call, options: &Options, bytes: u64) -> Result<()> {
        let (shape, plan) = self.plan(call.kind, bytes, options)?;
        call.args.plan = plan;
        call.args.blocks = shape.blocks;
        let name = kernel_name(call.kind, call.dtype, self.is_lean(call.kind, bytes, &plan));
        let ctx = self.device_view();
        match call.op {
            Some(op) => {
                // SAFETY: a reduction kernel of purlin-kernels takes (SnacArgs, Context, op: u32).
                let kernel: Kernel<(SnacArgs, purlin_device::context::Context, u32)> =
                    unsafe { Kernel::new(name) };
                // SAFETY: forwarded contract.
                unsafe { self.launch(&kernel, shape, (call.args, ctx, op as u32)) }
            }
            None => {
                // SAFETY: a copy kernel of purlin-kernels takes (SnacArgs, Context).
                let kernel: Kernel<(SnacArgs, purlin_device::context::Context)> =
                    unsafe { Kernel::new(name) };
                // SAFETY: forwarded contract.
                unsafe { self.launch(&kernel, shape, (call.args, ctx)) }
            }
        }
    }
}

/// Checks and launches a collective of fixed-size parts: `src` holds `parts.0` parts and `dst`
/// `parts.1` parts of `count` elements.
///
/// # Safety
/// As [`all_reduce_raw`].
#[allow(clippy::too_many_arguments)]
unsafe fn fixed(
    ctx: &Context,
    kind: CollectiveKind,
    dtype: DataType,
    op: Option<ReduceOpKind>,
    dst: Span,
    src: Span,
    count: u64,
    parts: (u32, u32),
    options: &Options,
) -> Result<()> {
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
    let call = Call {
        kind,
        dtype,
        args: args(dst, src, bytes).bounded(src.bytes, dst.bytes, u64::MAX),
        op,
    };
    // SAFETY: forwarded contract.
    unsafe { ctx.launch_call(call, options, bytes) }
}

fn args(dst: Span, src: Span, bytes: u64) -> SnacArgs {
    SnacArgs::new(dst.addr as *mut u8, src.addr as *const u8, bytes, 1)
}

/// `dst = src₀ ⊕ … ⊕ src_{world-1}` over `count` elements of `dtype` on every rank (raw device
/// addresses; `src == dst` is allowed).
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
pub unsafe fn all_reduce_raw(
    ctx: &Context,
    dtype: DataType,
    op: ReduceOpKind,
    dst: Span,
    src: Span,
    count: u64,
    options: &Options,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        fixed(
            ctx,
            CollectiveKind::AllReduce,
            dtype,
            Some(op),
            dst,
            src,
            count,
            (1, 1),
            options,
        )
    }
}

/// Rank `r`'s `count` elements (`src`) land at `dst[r × count ..]` on every rank.
///
/// # Safety
/// As [`all_reduce_raw`]; `dst` holds `world × count` elements.
pub unsafe fn all_gather_raw(
    ctx: &Context,
    dtype: DataType,
    dst: Span,
    src: Span,
    count: u64,
    options: &Options,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        fixed(
            ctx,
            CollectiveKind::AllGather,
            dtype,
            None,
            dst,
            src,
            count,
            (1, ctx.world()),
            options,
        )
    }
}

/// Rank `r` receives the reduction over ranks of part `r` (`count` elements) of every `src`
/// (`world × count` elements).
///
/// # Safety
/// As [`all_reduce_raw`]; `src` holds `world × count` elements, `dst` `count`.
pub unsafe fn reduce_scatter_raw(
    ctx: &Context,
    dtype: DataType,
    op: ReduceOpKind,
    dst: Span,
    src: Span,
    count: u64,
    options: &Options,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        fixed(
            ctx,
            CollectiveKind::ReduceScatter,
            dtype,
            Some(op),
            dst,
            src,
            count,
            (ctx.world(), 1),
            options,
        )
    }
}

/// Part `p` (`count` elements) of rank `r`'s `src` lands in part `r` of rank `p`'s `dst`.
///
/// # Safety
/// As [`all_reduce_raw`]; `src` and `dst` hold `world × count` elements.
pub unsafe fn all_to_all_raw(
    ctx: &Context,
    dtype: DataType,
    dst: Span,
    src: Span,
    count: u64,
    options: &Options,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe {
        fixed(
            ctx,
            CollectiveKind::AllToAll,
            dtype,
            None,
            dst,
            src,
            count,
            (ctx.world(), ctx.world()),
            options,
        )
    }
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

/// AllGatherV: rank `p` contributes `counts[p]` elements; every `dst` holds all contributions in
/// rank order.
///
/// # Safety
/// As [`all_reduce_raw`]; `counts` holds `world` counts (the same on every rank) and the
/// buffers hold what they describe, while the call runs.
pub unsafe fn all_gather_v_raw(
    ctx: &Context,
    dtype: DataType,
    dst: Span,
    src: Span,
    counts: Counts,
    options: &Options,
) -> Result<()> {
    let (call, max_bytes) = v_call(CollectiveKind::AllGatherV, dtype, dst, src, counts, None)?;
    // SAFETY: forwarded contract.
    unsafe { ctx.launch_call(call, options, max_bytes) }
}

/// ReduceScatterV: rank `r` receives the reduction of part `r` (`counts[r]` elements) of every
/// `src`, whose parts lie in rank order.
///
/// # Safety
/// As [`all_gather_v_raw`].
pub unsafe fn reduce_scatter_v_raw(
    ctx: &Context,
    dtype: DataType,
    op: ReduceOpKind,
    dst: Span,
    src: Span,
    counts: Counts,
    options: &Options,
) -> Result<()> {
    let (call, max_bytes) = v_call(
        CollectiveKind::ReduceScatterV,
        dtype,
        dst,
        src,
        counts,
        Some(op),
    )?;
    // SAFETY: forwarded contract.
    unsafe { ctx.launch_call(call, options, max_bytes) }
}

/// AllToAllV: `counts` holds `2 × world` counts: the elements this rank sends to each rank,
/// then the elements it receives from each rank.
///
/// # Safety
/// As [`all_gather_v_raw`], with `2 × world` counts.
pub unsafe fn all_to_all_v_raw(
    ctx: &Context,
    dtype: DataType,
    dst: Span,
    src: Span,
    counts: Counts,
    options: &Options,
) -> Result<()> {
    let (call, max_bytes) = v_call(CollectiveKind::AllToAllV, dtype, dst, src, counts, None)?;
    // SAFETY: forwarded contract.
    unsafe { ctx.launch_call(call, options, max_bytes) }
}

/// What a collective on a host-memory context (the CPU emulation's) gets: it has no GPU.
fn host_context() -> Error {
    Error::Unsupported("collectives on a host-memory context: use the CPU emulation".into())
}

/// The context's stream; a host-memory (CPU emulation) context has none.
fn stream_of(ctx: &Context) -> Result<&std::sync::Arc<cudarc::driver::CudaStream>> {
    ctx.stream().ok_or_else(host_context)
}

/// A typed buffer's span, if the buffer belongs to the context's stream.
///
/// Purlin turns cudarc's event tracking off on its GPU's context (see [`crate::Gpu`]), so a
/// buffer's lifetime is ordered against the collective only by its stream: cudarc frees a
/// dropped buffer on the stream it was allocated on. A buffer of the context's stream is
/// therefore freed only after every collective queued before the drop has run; one of another
/// stream could be freed while a queued collective still reads or writes it. The safe typed
/// functions refuse such buffers (use the `*_raw` forms, whose contract says so, for them).
fn own_stream<T>(
    what: &'static str,
    ctx: &Context,
    buf: &impl cudarc::driver::DeviceSlice<T>,
) -> Result<()> {
    let stream = stream_of(ctx)?;
    if std::sync::Arc::ptr_eq(cudarc::driver::DeviceSlice::stream(buf), stream) {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            what,
            reason: "the buffer belongs to another stream than the context's: it could be freed \
                     while the collective still uses it (allocate it on the context's stream, or \
                     use the *_raw form and keep it alive until the collective has run)"
                .into(),
        })
    }
}

fn span<T>(what: &'static str, ctx: &Context, buf: &impl DevicePtr<T>) -> Result<Span> {
    own_stream(what, ctx, buf)?;
    Ok(Span::from_device(buf, stream_of(ctx)?))
}

fn span_mut<T>(what: &'static str, ctx: &Context, buf: &mut impl DevicePtrMut<T>) -> Result<Span> {
    own_stream(what, ctx, buf)?;
    let stream = stream_of(ctx)?;
    let bytes = cudarc::driver::DeviceSlice::num_bytes(buf) as u64;
    let (addr, _guard) = buf.device_ptr_mut(stream);
    Ok(Span::new(addr, bytes))
}

/// AllReduce of `count` elements: `dst = src₀ ⊕ … ⊕ src_{world-1}` on every rank, on the
/// context's stream (see the [module docs](self) for an example).
///
/// Every buffer of the typed forms must belong to the context's stream, so that dropping it is
/// ordered after the collective ([`Error::InvalidArgument`] otherwise; the `*_raw` forms take
/// any device memory, under their safety contract). `src == dst` is allowed; other overlap is
/// refused.
pub fn all_reduce<T: Element>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
    count: usize,
    op: ReduceOpKind,
) -> Result<()> {
    all_reduce_with(ctx, src, dst, count, op, &Options::default())
}

/// [`all_reduce`] with [`Options`].
///
/// ```no_run
/// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>) -> purlin::Result<()> {
/// use purlin::collective::{all_reduce_with, Options, ReductionMode};
/// let deterministic = Options { mode: ReductionMode::Deterministic, ..Default::default() };
/// all_reduce_with(ctx, src, dst, 1024, purlin::ReduceOpKind::Sum, &deterministic)?;
/// # Ok(()) }
/// ```
pub fn all_reduce_with<T: Element>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
    count: usize,
    op: ReduceOpKind,
    options: &Options,
) -> Result<()> {
    let (s, d) = (span("src", ctx, src)?, span_mut("dst", ctx, dst)?);
    // SAFETY: both spans are whole live cudarc buffers of the caller, checked against `count`.
    unsafe { all_reduce_raw(ctx, T::DTYPE, op, d, s, count as u64, options) }
}

/// AllGather: every rank's `count` elements, in rank order, in every `dst` (`world × count`).
///
/// ```no_run
/// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<half::bf16>, dst: &mut cudarc::driver::CudaSlice<half::bf16>) -> purlin::Result<()> {
/// purlin::all_gather(ctx, src, dst, 4096)?;
/// # Ok(()) }
/// ```
pub fn all_gather<T: Element>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
    count: usize,
) -> Result<()> {
    let (s, d) = (span("src", ctx, src)?, span_mut("dst", ctx, dst)?);
    // SAFETY: both spans are whole live cudarc buffers of the caller, checked against `count`.
    unsafe { all_gather_raw(ctx, T::DTYPE, d, s, count as u64, &Options::default()) }
}

/// ReduceScatter: rank `r` gets the reduction of part `r` (`count` elements) of every `src`.
///
/// ```no_run
/// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>) -> purlin::Result<()> {
/// purlin::reduce_scatter(ctx, src, dst, 4096, purlin::ReduceOpKind::Max)?;
/// # Ok(()) }
/// ```
pub fn reduce_scatter<T: Element>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
    count: usize,
    op: ReduceOpKind,
) -> Result<()> {
    let (s, d) = (span("src", ctx, src)?, span_mut("dst", ctx, dst)?);
    // SAFETY: both spans are whole live cudarc buffers of the caller, checked against `count`.
    unsafe { reduce_scatter_raw(ctx, T::DTYPE, op, d, s, count as u64, &Options::default()) }
}

/// AllToAll: part `p` (`count` elements) of this rank's `src` goes to part `rank` of rank `p`'s
/// `dst`.
///
/// ```no_run
/// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>) -> purlin::Result<()> {
/// purlin::all_to_all(ctx, src, dst, 4096)?;
/// # Ok(()) }
/// ```
pub fn all_to_all<T: Element>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
    count: usize,
) -> Result<()> {
    let (s, d) = (span("src", ctx, src)?, span_mut("dst", ctx, dst)?);
    // SAFETY: both spans are whole live cudarc buffers of the caller, checked against `count`.
    unsafe { all_to_all_raw(ctx, T::DTYPE, d, s, count as u64, &Options::default()) }
}

fn counts_of(
    ctx: &Context,
    counts: &impl DevicePtr<u64>,
    needed: usize,
    max_count: usize,
) -> Result<Counts> {
    let span = span("counts", ctx, counts)?;
    validate::check_buffer("counts", span, needed as u64 * 8, 8)?;
    Ok(Counts {
        addr: span.addr,
        max_count: max_count as u64,
    })
}

/// AllGatherV: rank `p` contributes `counts[p]` elements (`world` counts in device memory, the
/// same on every rank, each at most `max_count`); every `dst` holds them all in rank order.
/// Replaying a captured call reads the counts anew.
///
/// ```no_run
/// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>, counts: &cudarc::driver::CudaSlice<u64>) -> purlin::Result<()> {
/// purlin::collective::all_gather_v(ctx, src, dst, counts, 4096)?;
/// # Ok(()) }
/// ```
pub fn all_gather_v<T: Element>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
    counts: &impl DevicePtr<u64>,
    max_count: usize,
) -> Result<()> {
    let counts = counts_of(ctx, counts, ctx.world() as usize, max_count)?;
    let (s, d) = (span("src", ctx, src)?, span_mut("dst", ctx, dst)?);
    // SAFETY: live cudarc buffers; the caller's counts describe them (see the docs).
    unsafe { all_gather_v_raw(ctx, T::DTYPE, d, s, counts, &Options::default()) }
}

/// ReduceScatterV: rank `r` receives the reduction of part `r` (`counts[r]` elements) of every
/// `src`, whose parts lie in rank order.
///
/// ```no_run
/// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>, counts: &cudarc::driver::CudaSlice<u64>) -> purlin::Result<()> {
/// purlin::collective::reduce_scatter_v(ctx, src, dst, counts, 4096, purlin::ReduceOpKind::Sum)?;
/// # Ok(()) }
/// ```
pub fn reduce_scatter_v<T: Element>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
    counts: &impl DevicePtr<u64>,
    max_count: usize,
    op: ReduceOpKind,
) -> Result<()> {
    let counts = counts_of(ctx, counts, ctx.world() as usize, max_count)?;
    let (s, d) = (span("src", ctx, src)?, span_mut("dst", ctx, dst)?);
    // SAFETY: live cudarc buffers; the caller's counts describe them (see the docs).
    unsafe { reduce_scatter_v_raw(ctx, T::DTYPE, op, d, s, counts, &Options::default()) }
}

/// AllToAllV: `counts` holds `2 × world` counts (sent to each rank, then received from each).
///
/// ```no_run
/// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>, counts: &cudarc::driver::CudaSlice<u64>) -> purlin::Result<()> {
/// purlin::collective::all_to_all_v(ctx, src, dst, counts, 4096)?;
/// # Ok(()) }
/// ```
pub fn all_to_all_v<T: Element>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
    counts: &impl DevicePtr<u64>,
    max_count: usize,
) -> Result<()> {
    let counts = counts_of(ctx, counts, 2 * ctx.world() as usize, max_count)?;
    let (s, d) = (span("src", ctx, src)?, span_mut("dst", ctx, dst)?);
    // SAFETY: live cudarc buffers; the caller's counts describe them (see the docs).
    unsafe { all_to_all_v_raw(ctx, T::DTYPE, d, s, counts, &Options::default()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every band of a compiled-in key survives the merge (it once kept only the first band of
    /// each key, so every AllReduce ran with the small-message row).
    #[test]
    fn merge_keeps_every_builtin_band_and_lets_the_file_win() {
        let builtin = Table::builtin();
        assert_eq!(merge(Vec::new(), builtin.rows()), builtin.rows());
        assert!(table().is_ok());

        let mut file_row = *builtin
            .rows()
            .iter()
            .find(|r| r.arch == 90 && r.world == 8 && r.collective == CollectiveKind::AllReduce)
            .unwrap();
        file_row.blocks = 3;
        file_row.max_bytes = u64::MAX;
        let merged = merge(vec![file_row], builtin.rows());
        let table = Table::new(&merged);
        for bytes in [0, 1 << 20, 1 << 30] {
            assert_eq!(
                table.lookup(90, 8, CollectiveKind::AllReduce, bytes).blocks,
                3
            );
        }
        // Other keys keep every band.
        let bands = |rows: &[Row]| {
            rows.iter()
                .filter(|r| {
                    r.arch == 90 && r.world == 8 && r.collective == CollectiveKind::AllGather
                })
                .count()
        };
        assert_eq!(bands(&merged), bands(builtin.rows()));
        assert!(bands(&merged) > 1);
    }
}
