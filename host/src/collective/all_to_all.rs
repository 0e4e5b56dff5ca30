//! AllToAll and AllToAllV on the host: the typed functions on cudarc buffers and the `*_raw`
//! ones on device ranges.

use super::raw::raw_collective;
use super::typed::{typed_fixed, typed_v};
use super::*;

raw_collective! {
    /// Part `p` (`count` elements) of rank `r`'s `src` lands in part `r` of rank `p`'s `dst`.
    ///
    /// # Safety
    /// As [`all_reduce_raw`]; `src` and `dst` hold `world × count` elements.
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: purlin::memory::Span, dst: purlin::memory::Span) -> purlin::Result<()> {
    /// use purlin::collective::{all_to_all_raw, Options};
    /// // 1024 f32 to every rank; both spans hold `world × 1024` of them.
    /// // SAFETY: both spans are live device buffers of the context's GPU.
    /// unsafe { all_to_all_raw(ctx, purlin::DataType::F32, dst, src, 1024, &Options::default())? };
    /// # Ok(()) }
    /// ```
    fn all_to_all_raw() = AllToAll, sized by count: u64;

    /// AllToAllV: `counts` holds `2 × world` counts: the elements this rank sends to each rank,
    /// then the elements it receives from each rank.
    ///
    /// # Safety
    /// As [`all_gather_v_raw`], with `2 × world` counts.
    fn all_to_all_v_raw() = AllToAllV, sized by counts: Counts;
}

typed_fixed! {
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

typed_v! {
    /// AllToAllV: `counts` holds `2 × world` counts (sent to each rank, then received from
    /// each).
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<f32>, dst: &mut cudarc::driver::CudaSlice<f32>, counts: &cudarc::driver::CudaSlice<u64>) -> purlin::Result<()> {
    /// purlin::collective::all_to_all_v(ctx, src, dst, counts, 4096)?;
    /// # Ok(()) }
    /// ```
    fn all_to_all_v() => all_to_all_v_raw for AllToAllV;
}
