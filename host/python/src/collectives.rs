//! The collectives, as the original's Python API has them: `(in_tensor, out_tensor, [sizes,]
//! handle, stream_ptr[, reduction_mode])`. Each checks its arguments (raising before anything
//! is queued), points the handle's context at `stream_ptr`, and queues one kernel there: no
//! host synchronisation, so every call can be captured in `torch.cuda.graph`.
//!
//! Reductions run in the tensor's dtype (bf16, fp16, fp8 e4m3/e5m2, fp32); the copy collectives
//! move bytes, so they take any dtype. Sizes in the V forms' lists are in bytes, as in the
//! original.

use crate::error::{BindingError, Result, value};
use crate::handle::{ContextHandle, Live};
use crate::tensor::{self, Tensor};
use purlin::collective::{
    Counts, Options, ReductionMode, all_gather_raw, all_gather_v_raw, all_reduce_raw,
    all_to_all_raw, all_to_all_v_raw, reduce_scatter_raw, reduce_scatter_v_raw,
};
use purlin::memory::Span;
use purlin::{Context, DataType, ReduceOpKind};
use pyo3::prelude::*;

/// The element type the copy collectives move: one byte, so any dtype travels as its bytes.
const BYTES: DataType = DataType::E4m3;

/// The reduction mode a Python `reduction_mode` (a `ReductionMode` or its int) names.
pub fn mode_of(mode: i64) -> Result<ReductionMode> {
    match mode {
        0 => Ok(ReductionMode::Default),
        1 => Ok(ReductionMode::Deterministic),
        _ => Err(value(format!(
            "reduction_mode must be ReductionMode.NON_DETERMINISTIC (0) or \
             ReductionMode.DETERMINISTIC (1), not {mode}"
        ))),
    }
}

/// The operator a Python `op` (a `ReduceOp` or its int) names.
pub fn op_of(op: i64) -> Result<ReduceOpKind> {
    match op {
        0 => Ok(ReduceOpKind::Sum),
        1 => Ok(ReduceOpKind::Max),
        2 => Ok(ReduceOpKind::Min),
        3 => Ok(ReduceOpKind::Prod),
        _ => Err(value(format!(
            "op must be ReduceOp.SUM (0), MAX (1), MIN (2) or PROD (3), not {op}"
        ))),
    }
}

fn options(mode: ReductionMode) -> Options {
    Options {
        mode,
        ..Default::default()
    }
}

/// The call's common arguments: the handle, its raw stream, and both tensors read and checked
/// on their own (CUDA tensors of the handle's device, contiguous, 16-byte aligned, one dtype).
struct Call<'a> {
    handle: &'a ContextHandle,
    stream: u64,
    src: Tensor,
    dst: Tensor,
}

impl<'a> Call<'a> {
    fn new(
        handle: &'a Bound<'_, ContextHandle>,
        src: &Bound<'_, PyAny>,
        dst: &Bound<'_, PyAny>,
        stream_ptr: &Bound<'_, PyAny>,
    ) -> Result<Self> {
        let handle = handle.get();
        let stream = tensor::stream_arg(stream_ptr)?;
        let src = tensor::read(src, "in_tensor", handle.ordinal())?;
        let dst = tensor::read(dst, "out_tensor", handle.ordinal())?;
        tensor::check_same_dtype(&src, &dst)?;
        src.check_aligned()?;
        dst.check_aligned()?;
        Ok(Self {
            handle,
            stream,
            src,
            dst,
        })
    }

    fn world(&self) -> u64 {
        self.handle.world() as u64
    }

    fn rank(&self) -> usize {
        self.handle.rank() as usize
    }

    /// `out_tensor` must hold exactly `numel` elements; `rule` says how it relates to
    /// `in_tensor`.
    fn out_numel(&self, numel: u64, rule: &str) -> Result<()> {
        if self.dst.numel != numel {
            return Err(value(format!(
                "out_tensor has {} elements but needs {numel}: {rule} (in_tensor has {})",
                self.dst.numel, self.src.numel
            )));
        }
        Ok(())
    }

    /// `in_tensor` split into `world` equal parts: the elements of one part, or the error that
    /// says `collective` needs a multiple of the world size.
    fn part_numel(&self, collective: &str) -> Result<u64> {
        if !self.src.numel.is_multiple_of(self.world()) {
            return Err(value(format!(
                "in_tensor has {} elements, not a multiple of the world size {}: {collective} \
                 splits it into world equal parts",
                self.src.numel,
                self.world()
            )));
        }
        Ok(self.src.numel / self.world())
    }

    /// Runs `f` on the handle's live state with its context on the call's stream.
    fn run(&self, f: impl FnOnce(&mut Live) -> purlin::Result<()>) -> PyResult<()> {
        self.handle
            .with_live(self.stream, |live| f(live).map_err(BindingError::from))?;
        Ok(())
    }

    /// Queues a collective of fixed parts, `launch(ctx, dst, src, count)`, unless `count` (the
    /// raw call's count) is zero: then only the stream is checked.
    fn launch_fixed(
        &self,
        count: u64,
        launch: impl FnOnce(&Context, Span, Span, u64) -> purlin::Result<()>,
    ) -> PyResult<()> {
        if count == 0 {
            return self.run(|_| Ok(()));
        }
        self.run(|live| launch(&live.ctx, self.dst.span(), self.src.span(), count))
    }

    /// Queues a V collective, `launch(ctx, dst, src, counts)`, with `counts` staged on the
    /// stream (see [`launch_v`]) and empty tensors standing in as zero-byte spans.
    fn launch_v(
        &self,
        counts: &[u64],
        max_count: u64,
        launch: impl FnOnce(&Context, Span, Span, Counts) -> purlin::Result<()>,
    ) -> PyResult<()> {
        self.run(|live| {
            let stand_in = live.counts_stand_in();
            let (dst, src) = (v_span(&self.dst, stand_in), v_span(&self.src, stand_in));
            launch_v(live, counts, max_count, |ctx, c| launch(ctx, dst, src, c))
        })
    }

    /// The V collective's byte list (`per_rank × world` entries, each a whole number of
    /// elements), read from the Python argument `name`.
    fn byte_list(
        &self,
        list: &Bound<'_, PyAny>,
        name: &str,
        per_rank: usize,
        what: &str,
    ) -> Result<Vec<u64>> {
        let entries = per_rank * self.world() as usize;
        tensor::byte_counts(list, name, entries, self.src.element_size, what)
    }
}

/// A span for a V collective's buffer: the tensor's, or — for an empty tensor, whose data
/// pointer may be null — a stand-in of zero bytes at an aligned, live address the kernel will
/// not touch (it moves no bytes from or to it).
fn v_span(t: &Tensor, stand_in: u64) -> Span {
    if t.numel == 0 {
        Span::new(stand_in, 0)
    } else {
        t.span()
    }
}

/// Stages `counts` on the live state's stream, runs `launch` with them (and `max_count`, which
/// picks the tuning band and must be the same on every rank), and marks the slot as in use by
/// what it queued.
fn launch_v(
    live: &mut Live,
    counts: &[u64],
    max_count: u64,
    launch: impl FnOnce(&Context, Counts) -> purlin::Result<()>,
) -> purlin::Result<()> {
    let stream = live.stream();
    // SAFETY: `stream` is the live stream `use_stream` checked to belong to the arena's GPU.
    let staged = unsafe { live.counts.stage(counts, stream) }.map_err(into_purlin)?;
    let launched = launch(
        &live.ctx,
        Counts {
            addr: staged.addr,
            max_count,
        },
    );
    // Marked even if the launch failed: the copy of the counts was queued either way.
    // SAFETY: as above.
    let marked = unsafe { live.counts.launched(staged, stream) }.map_err(into_purlin);
    launched.and(marked)
}

/// The arena's errors are driver errors or, for a full graph arena, a message.
fn into_purlin(e: BindingError) -> purlin::Error {
    match e {
        BindingError::Purlin(e) => e,
        other => purlin::Error::Unsupported(other.to_string()),
    }
}

/// AllReduce: `out_tensor = in_tensor₀ ⊕ … ⊕ in_tensor_{world-1}` on every rank.
///
/// `in_tensor` and `out_tensor`: CUDA tensors of the handle's device with the same dtype
/// (float32, float16, bfloat16, float8_e4m3fn, float8_e5m2) and number of elements,
/// contiguous, 16-byte aligned; they may be the same tensor. `stream_ptr`: the
/// `cudaStream_t` to queue on (`torch.cuda.current_stream().cuda_stream`).
/// `reduction_mode=ReductionMode.DETERMINISTIC` gives bitwise repeatable results (ranks
/// accumulated in f32 in rank order). `op` (keyword only, an extension): the operator,
/// `ReduceOp.SUM` by default.
#[pyfunction]
#[pyo3(signature = (in_tensor, out_tensor, handle, stream_ptr, reduction_mode = 0, *, op = 0))]
pub fn all_reduce(
    in_tensor: &Bound<'_, PyAny>,
    out_tensor: &Bound<'_, PyAny>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
    reduction_mode: i64,
    op: i64,
) -> PyResult<()> {
    let (mode, op) = (mode_of(reduction_mode)?, op_of(op)?);
    let call = Call::new(handle, in_tensor, out_tensor, stream_ptr)?;
    let dtype = call.src.reducible("all_reduce")?;
    call.out_numel(
        call.src.numel,
        "all_reduce writes as many elements as it reads",
    )?;
    // SAFETY: both spans are the data of live CUDA tensors of the context's device (checked),
    // each `numel × element_size` bytes; torch keeps them allocated while the caller holds
    // them, and work queued on the stream is ordered before their reuse as for any kernel on
    // that stream.
    call.launch_fixed(call.src.numel, |ctx, dst, src, n| unsafe {
        all_reduce_raw(ctx, dtype, op, dst, src, n, &options(mode))
    })
}

/// AllGather: every rank's `in_tensor`, in rank order, in every `out_tensor`
/// (`world × in_tensor.numel()` elements). Any dtype: the bytes are moved.
#[pyfunction]
#[pyo3(signature = (in_tensor, out_tensor, handle, stream_ptr))]
pub fn all_gather(
    in_tensor: &Bound<'_, PyAny>,
    out_tensor: &Bound<'_, PyAny>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let call = Call::new(handle, in_tensor, out_tensor, stream_ptr)?;
    call.out_numel(
        call.src.numel * call.world(),
        "all_gather writes world × in_tensor.numel() elements",
    )?;
    // SAFETY: as in `all_reduce`; `dst` holds `world × bytes` (checked).
    call.launch_fixed(call.src.bytes(), |ctx, dst, src, n| unsafe {
        all_gather_raw(ctx, BYTES, dst, src, n, &Options::default())
    })
}

/// ReduceScatter: `in_tensor` is `world` equal parts; rank `r`'s `out_tensor` receives the
/// reduction over ranks of part `r` (`in_tensor.numel() / world` elements). Reduction dtypes
/// and modes as `all_reduce`.
#[pyfunction]
#[pyo3(signature = (in_tensor, out_tensor, handle, stream_ptr, reduction_mode = 0, *, op = 0))]
pub fn reduce_scatter(
    in_tensor: &Bound<'_, PyAny>,
    out_tensor: &Bound<'_, PyAny>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
    reduction_mode: i64,
    op: i64,
) -> PyResult<()> {
    let (mode, op) = (mode_of(reduction_mode)?, op_of(op)?);
    let call = Call::new(handle, in_tensor, out_tensor, stream_ptr)?;
    let dtype = call.src.reducible("reduce_scatter")?;
    let count = call.part_numel("reduce_scatter")?;
    call.out_numel(
        count,
        "reduce_scatter writes in_tensor.numel() / world elements",
    )?;
    // SAFETY: as in `all_reduce`; `src` holds `world × count` elements (checked).
    call.launch_fixed(count, |ctx, dst, src, n| unsafe {
        reduce_scatter_raw(ctx, dtype, op, dst, src, n, &options(mode))
    })
}

/// AllToAll: `in_tensor` is `world` equal parts; part `p` goes to rank `p`, where it lands as
/// part `rank` of `out_tensor` (as many elements as `in_tensor`). Any dtype.
#[pyfunction]
#[pyo3(signature = (in_tensor, out_tensor, handle, stream_ptr))]
pub fn all_to_all(
    in_tensor: &Bound<'_, PyAny>,
    out_tensor: &Bound<'_, PyAny>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let call = Call::new(handle, in_tensor, out_tensor, stream_ptr)?;
    call.part_numel("all_to_all")?;
    call.out_numel(
        call.src.numel,
        "all_to_all writes as many elements as it reads",
    )?;
    // SAFETY: as in `all_reduce`; both hold `world × part` bytes (checked).
    call.launch_fixed(call.src.bytes() / call.world(), |ctx, dst, src, n| unsafe {
        all_to_all_raw(ctx, BYTES, dst, src, n, &Options::default())
    })
}

/// `out_tensor` (or `in_tensor`) must hold at least `needed` bytes.
fn at_least(t: &Tensor, needed: u64, rule: &str) -> Result<()> {
    if t.bytes() < needed {
        return Err(value(format!(
            "{} holds {} bytes but needs {needed}: {rule}",
            t.what,
            t.bytes()
        )));
    }
    Ok(())
}

/// AllGatherV: rank `p` contributes `bytes_list[p]` bytes (the start of its `in_tensor`);
/// every `out_tensor` receives all contributions back to back in rank order. `bytes_list` has
/// `world` entries, the same on every rank, each a whole number of elements. Any dtype.
#[pyfunction]
#[pyo3(signature = (in_tensor, out_tensor, bytes_list, handle, stream_ptr))]
pub fn all_gather_v(
    in_tensor: &Bound<'_, PyAny>,
    out_tensor: &Bound<'_, PyAny>,
    bytes_list: &Bound<'_, PyAny>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let call = Call::new(handle, in_tensor, out_tensor, stream_ptr)?;
    let sizes = call.byte_list(bytes_list, "bytes_list", 1, "one size in bytes per rank")?;
    at_least(
        &call.src,
        sizes[call.rank()],
        "bytes_list[rank] bytes are sent",
    )?;
    at_least(
        &call.dst,
        sizes.iter().sum(),
        "all_gather_v writes sum(bytes_list) bytes",
    )?;
    // Every rank passes the same list, so its largest entry agrees across ranks.
    let max_count = sizes.iter().copied().max().unwrap_or(0);
    // SAFETY: the spans are live tensor data of the context's device (or a stand-in of zero
    // bytes), at least as long as the counts describe (checked above); the counts are device
    // memory of the arena, staged on this stream before the kernel.
    call.launch_v(&sizes, max_count, |ctx, dst, src, counts| unsafe {
        all_gather_v_raw(ctx, BYTES, dst, src, counts, &Options::default())
    })
}

/// ReduceScatterV: `in_tensor` holds `world` parts of `bytes_list[p]` bytes back to back; rank
/// `r`'s `out_tensor` receives the reduction of part `r` over ranks. `bytes_list` has `world`
/// entries, the same on every rank. Reduction dtypes and modes as `all_reduce`.
#[pyfunction]
#[pyo3(signature = (in_tensor, out_tensor, bytes_list, handle, stream_ptr, reduction_mode = 0, *, op = 0))]
#[allow(clippy::too_many_arguments)]
pub fn reduce_scatter_v(
    in_tensor: &Bound<'_, PyAny>,
    out_tensor: &Bound<'_, PyAny>,
    bytes_list: &Bound<'_, PyAny>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
    reduction_mode: i64,
    op: i64,
) -> PyResult<()> {
    let (mode, op) = (mode_of(reduction_mode)?, op_of(op)?);
    let call = Call::new(handle, in_tensor, out_tensor, stream_ptr)?;
    let dtype = call.src.reducible("reduce_scatter_v")?;
    let sizes = call.byte_list(bytes_list, "bytes_list", 1, "one size in bytes per rank")?;
    at_least(
        &call.src,
        sizes.iter().sum(),
        "reduce_scatter_v reads sum(bytes_list) bytes",
    )?;
    at_least(
        &call.dst,
        sizes[call.rank()],
        "bytes_list[rank] bytes are received",
    )?;
    let counts: Vec<u64> = sizes.iter().map(|b| b / call.src.element_size).collect();
    let max_count = counts.iter().copied().max().unwrap_or(0);
    // SAFETY: as in `all_gather_v`.
    call.launch_v(&counts, max_count, |ctx, dst, src, c| unsafe {
        reduce_scatter_v_raw(ctx, dtype, op, dst, src, c, &options(mode))
    })
}

/// AllToAllV: `splits` has `2 × world` entries in bytes: first what this rank sends to each
/// rank (its `in_tensor` holds those parts back to back in rank order), then what it receives
/// from each rank (landing back to back in rank order in `out_tensor`). What rank `p` sends to
/// rank `q` must equal what `q` expects from `p`. Any dtype.
///
/// Ranks' splits differ, so the tuning band cannot come from them: `max_bytes` (keyword only,
/// an extension) is a bound on every split, the same on every rank, that picks it; by default
/// the largest band is used.
#[pyfunction]
#[pyo3(signature = (in_tensor, out_tensor, splits, handle, stream_ptr, *, max_bytes = None))]
pub fn all_to_all_v(
    in_tensor: &Bound<'_, PyAny>,
    out_tensor: &Bound<'_, PyAny>,
    splits: &Bound<'_, PyAny>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
    max_bytes: Option<u64>,
) -> PyResult<()> {
    let call = Call::new(handle, in_tensor, out_tensor, stream_ptr)?;
    let world = call.world() as usize;
    let sizes = call.byte_list(
        splits,
        "splits",
        2,
        "world sizes sent (in bytes, to each rank), then world sizes received (from each rank)",
    )?;
    at_least(
        &call.src,
        sizes[..world].iter().sum(),
        "all_to_all_v sends sum(splits[:world]) bytes",
    )?;
    at_least(
        &call.dst,
        sizes[world..].iter().sum(),
        "all_to_all_v receives sum(splits[world:]) bytes",
    )?;
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let max_count = match max_bytes {
        Some(m) if m < largest => {
            return Err(value(format!(
                "max_bytes is {m}, but splits has an entry of {largest} bytes: max_bytes bounds \
                 every split (on every rank)"
            ))
            .into());
        }
        Some(m) => m,
        None => u64::MAX,
    };
    // SAFETY: as in `all_gather_v`.
    call.launch_v(&sizes, max_count, |ctx, dst, src, counts| unsafe {
        all_to_all_v_raw(ctx, BYTES, dst, src, counts, &Options::default())
    })
}
