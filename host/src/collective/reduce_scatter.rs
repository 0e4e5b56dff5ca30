//! ReduceScatter and ReduceScatterV on the host: the typed functions on cudarc buffers and
//! the `*_raw` ones on device ranges.

use super::raw::raw_collective;
use super::typed::{typed_fixed, typed_v};
use super::*;

raw_collective! {
    /// Rank `r` receives the reduction over ranks of part `r` (`count` elements) of every `src`
    /// (`world × count` elements).
    ///
    /// # Safety
    /// As [`all_reduce_raw`]; `src` holds `world × count` elements, `dst` `count`.
    fn reduce_scatter_raw(op) = ReduceScatter, sized by count: u64;

    /// ReduceScatterV: rank `r` receives the reduction of part `r` (`counts[r]` elements) of
    /// every `src`, whose parts lie in rank order.
    ///
    /// # Safety
    /// As [`all_gather_v_raw`].
    fn reduce_scatter_v_raw(op) = ReduceScatterV, sized by counts: Counts;
}

typed_fixed! {
    /// ReduceScatter: rank `r` gets the reduction of part `r` (`count` elements) of every `src`.
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>) -> purlin::Result<()> {
    /// purlin::reduce_scatter(ctx, src, dst, 4096, purlin::ReduceOpKind::Max)?;
    /// # Ok(()) }
    /// ```
    fn reduce_scatter(op) => reduce_scatter_raw;
}

typed_v! {
    /// ReduceScatterV: rank `r` receives the reduction of part `r` (`counts[r]` elements) of
    /// every `src`, whose parts lie in rank order.
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>, counts: &cudarc::driver::CudaSlice<u64>) -> purlin::Result<()> {
    /// purlin::collective::reduce_scatter_v(ctx, src, dst, counts, 4096, purlin::ReduceOpKind::Sum)?;
    /// # Ok(()) }
    /// ```
    fn reduce_scatter_v(op) => reduce_scatter_v_raw for ReduceScatterV;
}
