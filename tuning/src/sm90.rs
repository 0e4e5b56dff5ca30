//! The sm_90 rows (H200), tuned on the H200's virtual node by `purlin-tune --ranks 8,4,2 --bands
//! 64K,1M,16M --runs 6` (2026-11-30, commit f7dceb5; the sweep in `benches/RESULTS.md`). The build
//! script generates them from the table the tuner wrote, `tuning/tables/sm90-h200.table`: per
//! world, collective and message band (≤ 64 KiB, ≤ 1 MiB, above) the tuner chose blocks per rank,
//! producer (put) blocks and the chunk size, timing bf16 sums in CUDA graphs. Blocks never exceed
//! what keeps every rank of a virtual node resident (132 SMs / world). The two-shot bounds are the
//! original's H200 starting points (the tuner keeps them). The latency thresholds at 8 ranks (every
//! collective) and of AllReduce at 4 and 2 ranks were measured on 2026-12-03 (H200, fad8cc5, one
//! graph: each collective from 32 KiB to 4 MiB per part with the earlier thresholds (128 KiB at 8
//! ranks) and with the latency regime wherever it fits,
//! `benches/results/2026-12-03-h200-fad8cc5-threshold-*`): each is the largest size at which the
//! packets were still faster (AllReduce: 2 MiB at 8 and 2 ranks, 4 MiB at 4; `bound × world` of 512
//! KiB for AllGather and AllToAll, 1 MiB for ReduceScatter); the other worlds keep the original's.
//! The V forms take their fixed-size counterpart's largest band: the tuner does not sweep them yet.
//! AllReduce's bands above 64 KiB were split by hand on 2026-12-08 (H100, virtual node,
//! `benches/RESULTS.md` run 17; the table file's comments give the numbers): fewer blocks where
//! the pass over reached buffers starts (1-4 MiB at 8 ranks, 2-4 at 4, 4-8 at 2) and at 64-128
//! KiB (8 ranks) and 64-256 KiB (4 ranks), the tuner's blocks elsewhere.

use super::Row;
use purlin_device::collective::{Algorithm, CollectiveKind};
use purlin_device::snac::{Plan, ReductionMode};

include!(concat!(env!("OUT_DIR"), "/sm90_rows.rs"));
