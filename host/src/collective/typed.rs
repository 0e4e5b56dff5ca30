//! The typed collectives on cudarc buffers: safe, because the buffers are checked to belong
//! to the context's stream and their lengths bound the call.

use super::*;

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

/// The spans of a typed call's buffers, each checked to belong to the context's stream.
fn spans<T>(
    ctx: &Context,
    src: &impl DevicePtr<T>,
    dst: &mut impl DevicePtrMut<T>,
) -> Result<(Span, Span)> {
    Ok((span("src", ctx, src)?, span_mut("dst", ctx, dst)?))
}

/// Declares a typed collective of fixed parts over its raw form (`$raw`), with the default
/// [`Options`]. `(op)` after the name makes it a reduction, taking the operator last; `()` a
/// copy.
macro_rules! typed_fixed {
    ($($(#[$doc:meta])* fn $name:ident($($op:ident)?) => $raw:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name<T: Element>(
            ctx: &Context,
            src: &impl DevicePtr<T>,
            dst: &mut impl DevicePtrMut<T>,
            count: usize,
            $($op: ReduceOpKind,)?
        ) -> Result<()> {
            let (s, d) = spans(ctx, src, dst)?;
            // SAFETY: both spans are whole live cudarc buffers of the caller, checked against
            // `count`.
            unsafe { $raw(ctx, T::DTYPE, $($op,)? d, s, count as u64, &Options::default()) }
        }
    )*};
}

typed_fixed! {
    /// AllReduce of `count` elements: `dst = src₀ ⊕ … ⊕ src_{world-1}` on every rank, on the
    /// context's stream (see the [module docs](crate::collective) for an example).
    ///
    /// Every buffer of the typed forms must belong to the context's stream, so that dropping it is
    /// ordered after the collective ([`Error::InvalidArgument`] otherwise; the `*_raw` forms take
    /// any device memory, under their safety contract). `src == dst` is allowed; other overlap is
    /// refused.
    fn all_reduce(op) => all_reduce_raw;

    /// AllGather: every rank's `count` elements, in rank order, in every `dst` (`world × count`).
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<half::bf16>, dst: &mut cudarc::driver::CudaSlice<half::bf16>) -> purlin::Result<()> {
    /// purlin::all_gather(ctx, src, dst, 4096)?;
    /// # Ok(()) }
    /// ```
    fn all_gather() => all_gather_raw;

    /// ReduceScatter: rank `r` gets the reduction of part `r` (`count` elements) of every `src`.
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>) -> purlin::Result<()> {
    /// purlin::reduce_scatter(ctx, src, dst, 4096, purlin::ReduceOpKind::Max)?;
    /// # Ok(()) }
    /// ```
    fn reduce_scatter(op) => reduce_scatter_raw;

    /// AllToAll: part `p` (`count` elements) of this rank's `src` goes to part `rank` of rank
    /// `p`'s `dst`.
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>) -> purlin::Result<()> {
    /// purlin::all_to_all(ctx, src, dst, 4096)?;
    /// # Ok(()) }
    /// ```
    fn all_to_all() => all_to_all_raw;
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
    let (s, d) = spans(ctx, src, dst)?;
    // SAFETY: both spans are whole live cudarc buffers of the caller, checked against `count`.
    unsafe { all_reduce_raw(ctx, T::DTYPE, op, d, s, count as u64, options) }
}

/// Declares a typed V collective over its raw form (`$raw`), whose counts in device memory
/// hold `$per_rank × world` entries. `(op)` after the name makes it a reduction, `()` a copy.
macro_rules! typed_v {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($op:ident)?) => $raw:ident, $per_rank:literal counts per rank;
    )*) => {$(
        $(#[$doc])*
        pub fn $name<T: Element>(
            ctx: &Context,
            src: &impl DevicePtr<T>,
            dst: &mut impl DevicePtrMut<T>,
            counts: &impl DevicePtr<u64>,
            max_count: usize,
            $($op: ReduceOpKind,)?
        ) -> Result<()> {
            let counts = counts_of(ctx, counts, $per_rank * ctx.world() as usize, max_count)?;
            let (s, d) = spans(ctx, src, dst)?;
            // SAFETY: live cudarc buffers; the caller's counts describe them (see the docs).
            unsafe { $raw(ctx, T::DTYPE, $($op,)? d, s, counts, &Options::default()) }
        }
    )*};
}

typed_v! {
    /// AllGatherV: rank `p` contributes `counts[p]` elements (`world` counts in device memory,
    /// the same on every rank, each at most `max_count`); every `dst` holds them all in rank
    /// order. Replaying a captured call reads the counts anew.
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>, counts: &cudarc::driver::CudaSlice<u64>) -> purlin::Result<()> {
    /// purlin::collective::all_gather_v(ctx, src, dst, counts, 4096)?;
    /// # Ok(()) }
    /// ```
    fn all_gather_v() => all_gather_v_raw, 1 counts per rank;

    /// ReduceScatterV: rank `r` receives the reduction of part `r` (`counts[r]` elements) of
    /// every `src`, whose parts lie in rank order.
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>, counts: &cudarc::driver::CudaSlice<u64>) -> purlin::Result<()> {
    /// purlin::collective::reduce_scatter_v(ctx, src, dst, counts, 4096, purlin::ReduceOpKind::Sum)?;
    /// # Ok(()) }
    /// ```
    fn reduce_scatter_v(op) => reduce_scatter_v_raw, 1 counts per rank;

    /// AllToAllV: `counts` holds `2 × world` counts (sent to each rank, then received from
    /// each).
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>, counts: &cudarc::driver::CudaSlice<u64>) -> purlin::Result<()> {
    /// purlin::collective::all_to_all_v(ctx, src, dst, counts, 4096)?;
    /// # Ok(()) }
    /// ```
    fn all_to_all_v() => all_to_all_v_raw, 2 counts per rank;
}
