//! AllGather and AllGatherV on the host: the typed functions on cudarc buffers and the
//! `*_raw` ones on device ranges.

use super::raw::raw_collective;
use super::typed::{typed_fixed, typed_v};
use super::*;

raw_collective! {
    /// Rank `r`'s `count` elements (`src`) land at `dst[r × count ..]` on every rank.
    ///
    /// # Safety
    /// As [`all_reduce_raw`]; `dst` holds `world × count` elements.
    fn all_gather_raw() = AllGather, sized by count: u64;

    /// AllGatherV: rank `p` contributes `counts[p]` elements; every `dst` holds all
    /// contributions in rank order.
    ///
    /// # Safety
    /// As [`all_reduce_raw`]; `counts` holds `world` counts (the same on every rank) and the
    /// buffers hold what they describe, while the call runs.
    fn all_gather_v_raw() = AllGatherV, sized by counts: Counts;
}

typed_fixed! {
    /// AllGather: every rank's `count` elements, in rank order, in every `dst` (`world × count`).
    ///
    /// ```no_run
    /// # fn demo(ctx: &purlin::Context, src: &cudarc::driver::CudaSlice<half::bf16>, dst: &mut cudarc::driver::CudaSlice<half::bf16>) -> purlin::Result<()> {
    /// purlin::all_gather(ctx, src, dst, 4096)?;
    /// # Ok(()) }
    /// ```
    fn all_gather() => all_gather_raw;
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
    fn all_gather_v() => all_gather_v_raw for AllGatherV;
}
