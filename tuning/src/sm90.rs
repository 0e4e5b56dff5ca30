//! The sm_90 rows (H200), tuned on the H200's virtual node by
//! `purlin-tune --ranks 8,4,2 --bands 64K,1M,16M --runs 6` (2026-11-30, commit f7dceb5; the
//! table it wrote is `benches/sm90-h200.table`, the sweep in `benches/RESULTS.md`). Per world,
//! collective and message band (≤ 64 KiB, ≤ 1 MiB, above) the tuner chose blocks per rank,
//! producer (put) blocks and the chunk size, timing bf16 sums in CUDA graphs. Blocks never
//! exceed what keeps every rank of a virtual node resident (132 SMs / world). Latency thresholds
//! and the two-shot bounds are the original's H200 starting points (the tuner keeps them). The
//! V forms take their fixed-size counterpart's largest band: the tuner does not sweep them yet.

use super::Row;
use purlin_device::snac::{Algorithm, CollectiveKind, Plan, ReductionMode};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const ANY: u64 = u64::MAX;

use CollectiveKind::{
    AllGather as AG, AllGatherV as AGV, AllReduce as AR, AllToAll as A2A, AllToAllV as A2AV,
};
use CollectiveKind::{ReduceScatter as RS, ReduceScatterV as RSV};

/// One tuned row: `blocks` per rank, `put` producer blocks, `chunk` bytes per staging chunk;
/// the latency threshold and two-shot bound of `world`.
const fn tuned(
    world: u32,
    collective: CollectiveKind,
    max_bytes: u64,
    blocks: u32,
    put: u32,
    chunk: u64,
) -> Row {
    // One-shot packets up to the threshold, two-shot above `two_shot` (from 4 ranks).
    let (latency_threshold, two_shot_min_bytes) = match world {
        2 => (512 * KIB, 64 * KIB),
        4 => (256 * KIB, 128 * KIB),
        _ => (128 * KIB, 64 * KIB),
    };
    Row {
        arch: 90,
        world,
        collective,
        max_bytes,
        blocks,
        plan: Plan {
            threads: if matches!(collective, AR) { 256 } else { 128 },
            put_blocks: put,
            chunk_bytes: chunk,
            latency_threshold,
            two_shot_min_bytes,
            two_shot_min_world: 4,
            algorithm: Algorithm::Auto as u32,
            mode: ReductionMode::Default as u32,
            reserved: 0,
        },
    }
}

/// Every sm_90 row.
#[rustfmt::skip]
pub(crate) const ROWS: [Row; 45] = [
    tuned(2, AR, 64 * KIB, 32, 16, MIB),
    tuned(2, AR, MIB, 64, 16, MIB),
    tuned(2, AR, ANY, 64, 16, 4 * MIB),
    tuned(2, AG, 64 * KIB, 32, 8, 4 * MIB),
    tuned(2, AG, MIB, 64, 16, MIB),
    tuned(2, AG, ANY, 64, 16, 4 * MIB),
    tuned(2, RS, 64 * KIB, 32, 16, 4 * MIB),
    tuned(2, RS, MIB, 64, 32, MIB),
    tuned(2, RS, ANY, 64, 16, 4 * MIB),
    tuned(2, A2A, 64 * KIB, 32, 16, 4 * MIB),
    tuned(2, A2A, MIB, 64, 32, 4 * MIB),
    tuned(2, A2A, ANY, 64, 16, 4 * MIB),
    tuned(2, AGV, ANY, 64, 16, 4 * MIB),
    tuned(2, RSV, ANY, 64, 16, 4 * MIB),
    tuned(2, A2AV, ANY, 64, 16, 4 * MIB),
    tuned(4, AR, 64 * KIB, 16, 4, 4 * MIB),
    tuned(4, AR, MIB, 32, 16, 256 * KIB),
    tuned(4, AR, ANY, 32, 8, MIB),
    tuned(4, AG, 64 * KIB, 16, 4, 4 * MIB),
    tuned(4, AG, MIB, 32, 16, 4 * MIB),
    tuned(4, AG, ANY, 32, 8, 4 * MIB),
    tuned(4, RS, 64 * KIB, 16, 8, MIB),
    tuned(4, RS, MIB, 32, 8, 4 * MIB),
    tuned(4, RS, ANY, 32, 8, 4 * MIB),
    tuned(4, A2A, 64 * KIB, 32, 16, 4 * MIB),
    tuned(4, A2A, MIB, 32, 16, 4 * MIB),
    tuned(4, A2A, ANY, 32, 16, 4 * MIB),
    tuned(4, AGV, ANY, 32, 8, 4 * MIB),
    tuned(4, RSV, ANY, 32, 8, 4 * MIB),
    tuned(4, A2AV, ANY, 32, 16, 4 * MIB),
    tuned(8, AR, 64 * KIB, 8, 2, 4 * MIB),
    tuned(8, AR, MIB, 16, 4, MIB),
    tuned(8, AR, ANY, 16, 4, MIB),
    tuned(8, AG, 64 * KIB, 16, 4, 256 * KIB),
    tuned(8, AG, MIB, 16, 4, 256 * KIB),
    tuned(8, AG, ANY, 16, 8, 4 * MIB),
    tuned(8, RS, 64 * KIB, 16, 8, MIB),
    tuned(8, RS, MIB, 16, 4, 256 * KIB),
    tuned(8, RS, ANY, 16, 4, MIB),
    tuned(8, A2A, 64 * KIB, 16, 8, MIB),
    tuned(8, A2A, MIB, 16, 8, MIB),
    tuned(8, A2A, ANY, 16, 8, MIB),
    tuned(8, AGV, ANY, 16, 8, 4 * MIB),
    tuned(8, RSV, ANY, 16, 4, MIB),
    tuned(8, A2AV, ANY, 16, 8, MIB),
];
