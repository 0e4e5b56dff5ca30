//! AllReduce on the host: the typed functions on cudarc buffers and the `*_raw` ones on
//! device ranges.

use super::raw::raw_collective;
use super::typed::{spans, typed_fixed};
use super::*;

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
