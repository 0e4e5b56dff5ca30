//! The sm_90 rows (H200). Starting points from the original's H200 codesign policies, with
//! blocks per rank sized so that a virtual node of `world` ranks on one GPU keeps every rank's
//! blocks resident at once (132 SMs × 3 blocks of the Sm90 Atom's shared memory).
//! `benches/RESULTS.md` records the sweeps that set them.

use super::Row;
use purlin_device::snac::{Algorithm, CollectiveKind, Plan, ReductionMode};

const fn plan(
    threads: u32,
    put_blocks: u32,
    chunk_bytes: u64,
    latency_threshold: u64,
    two_shot_min_bytes: u64,
) -> Plan {
    Plan {
        threads,
        put_blocks,
        chunk_bytes,
        latency_threshold,
        two_shot_min_bytes,
        two_shot_min_world: 4,
        algorithm: Algorithm::Auto as u32,
        mode: ReductionMode::Default as u32,
        reserved: 0,
    }
}

const fn row(
    world: u32,
    collective: CollectiveKind,
    max_bytes: u64,
    blocks: u32,
    plan: Plan,
) -> Row {
    Row {
        arch: 90,
        world,
        collective,
        max_bytes,
        blocks,
        plan,
    }
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const ANY: u64 = u64::MAX;

use CollectiveKind::{
    AllGather as AG, AllGatherV as AGV, AllReduce as AR, AllToAll as A2A, AllToAllV as A2AV,
};
use CollectiveKind::{ReduceScatter as RS, ReduceScatterV as RSV};

/// Rows for one world: small messages get few blocks, large ones the full shape.
macro_rules! world_rows {
    ($w:literal, $big:literal, $put:literal, $chunk:expr, $lat:expr, $two:expr) => {
        [
            row($w, AR, 64 * KIB, 8, plan(256, 4, $chunk, $lat, $two)),
            row(
                $w,
                AR,
                4 * MIB,
                $big / 2,
                plan(256, $put / 2, $chunk, $lat, $two),
            ),
            row($w, AR, ANY, $big, plan(256, $put, $chunk, $lat, $two)),
            row($w, AG, 64 * KIB, 8, plan(128, 4, $chunk, $lat, $two)),
            row($w, AG, ANY, $big, plan(128, $put, $chunk, $lat, $two)),
            row($w, AGV, ANY, $big, plan(128, $put, $chunk, $lat, $two)),
            row($w, RS, 64 * KIB, 8, plan(128, 4, $chunk, $lat, $two)),
            row($w, RS, ANY, $big, plan(128, $put, $chunk, $lat, $two)),
            row($w, RSV, ANY, $big, plan(128, $put, $chunk, $lat, $two)),
            row($w, A2A, 64 * KIB, 8, plan(128, 4, $chunk, $lat, $two)),
            row($w, A2A, ANY, $big, plan(128, $put, $chunk, $lat, $two)),
            row($w, A2AV, ANY, $big, plan(128, $put, $chunk, $lat, $two)),
        ]
    };
}

const W2: [Row; 12] = world_rows!(2, 48, 24, 4 * MIB, 512 * KIB, 64 * KIB);
const W4: [Row; 12] = world_rows!(4, 32, 16, MIB, 256 * KIB, 128 * KIB);
const W8: [Row; 12] = world_rows!(8, 16, 8, 512 * KIB, 128 * KIB, 64 * KIB);

/// Every sm_90 row.
pub(crate) const ROWS: [Row; 36] = {
    let mut rows = [W2[0]; 36];
    let mut i = 0;
    while i < 12 {
        rows[i] = W2[i];
        rows[12 + i] = W4[i];
        rows[24 + i] = W8[i];
        i += 1;
    }
    rows
};
