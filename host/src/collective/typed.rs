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
pub(super) fn spans<T>(
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
            let (s, d) = $crate::collective::typed::spans(ctx, src, dst)?;
            // SAFETY: both spans are whole live cudarc buffers of the caller, checked against
            // `count`.
            unsafe { $raw(ctx, T::DTYPE, $($op,)? d, s, count as u64, &Options::default()) }
        }
    )*};
}
pub(super) use typed_fixed;

pub(super) fn counts_of(
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

/// Declares a typed V collective over its raw form (`$raw`), whose counts in device memory
/// hold `counts_per_rank × world` entries (its collective's [`Semantics`]). `(op)` after the
/// name makes it a reduction, `()` a copy.
///
/// [`Semantics`]: purlin_device::collective::Semantics
macro_rules! typed_v {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($op:ident)?) => $raw:ident for $kind:ident;
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
            let per_rank = CollectiveKind::$kind.semantics().counts_per_rank as usize;
            let counts = $crate::collective::typed::counts_of(
                ctx,
                counts,
                per_rank * ctx.world() as usize,
                max_count,
            )?;
            let (s, d) = $crate::collective::typed::spans(ctx, src, dst)?;
            // SAFETY: live cudarc buffers; the caller's counts describe them (see the docs).
            unsafe { $raw(ctx, T::DTYPE, $($op,)? d, s, counts, &Options::default()) }
        }
    )*};
}
pub(super) use typed_v;
