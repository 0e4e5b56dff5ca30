//! Random sequences of collective calls, their inputs and an independent reference for every
//! output: what the queued-call tests run on the CPU emulation and on the GPU.
//!
//! A [`Step`] is one call as every rank makes it (kind, element type, operator, sizes, launch
//! shape and plan); [`Step::inputs`] draws fresh inputs for every rank and [`Step::check`]
//! compares one rank's output with a reference computed here, from the inputs alone (f32
//! rank-order bits and an f64 tolerance for reductions, the bytes themselves for copies), and
//! checks the guard bytes after the output.

use crate::{POISON, count_wrong_f64, random_elements, reference_f32};
use purlin::{DataType, ReduceOpKind};
use purlin_device::collective::{Algorithm, CollectiveKind};
use purlin_device::snac::{Plan, ReductionMode};
use rand::RngExt;
use rand::rngs::SmallRng;

/// Poisoned bytes after every output, checked after the run.
pub const GUARD: usize = 64;

/// The staging and window sizes the sizes of a sequence are drawn around.
#[derive(Clone, Copy, Debug)]
pub struct Bands {
    /// Bytes of one throughput staging half.
    pub half: u64,
    /// Bytes of one latency window.
    pub window: u64,
    /// The largest part a call may move, in bytes.
    pub max_part: u64,
}

/// What may change from call to call.
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    /// Threads per block to draw from (CPU emulation; the GPU launches its own).
    pub threads: &'static [u32],
    /// Most blocks per launch.
    pub max_blocks: u32,
    /// Whether each step draws its own plan (chunk, producers, algorithm, thresholds); else
    /// the table's (GPU: what a user gets).
    pub random_plan: bool,
}

/// One call of a sequence, as every rank makes it.
#[derive(Clone, Debug)]
pub struct Step {
    /// Which collective.
    pub kind: CollectiveKind,
    /// Element type (copies: only its size matters).
    pub dtype: DataType,
    /// Operator (reductions).
    pub op: ReduceOpKind,
    /// Fixed-size collectives: elements per part (AllReduce: the whole buffer).
    pub count: u64,
    /// V collectives: `counts[p][q]` elements from rank `p` to rank `q` (AllToAllV), or
    /// `counts[0][p]` the part of rank `p` (AllGatherV, ReduceScatterV).
    pub counts: Vec<Vec<u64>>,
    /// Blocks per rank.
    pub blocks: u32,
    /// Threads per block (CPU emulation).
    pub threads: u32,
    /// Plan (when the step draws its own).
    pub plan: Option<Plan>,
    /// Reductions on the CPU: the run-time operator form (`_op`), as the host kernels run.
    pub runtime_op: bool,
    /// AllReduce: a forced algorithm.
    pub algorithm: Option<Algorithm>,
    /// Reduction mode.
    pub mode: ReductionMode,
    /// On a GPU context whose ranks share one address space: stage the buffers anyway
    /// (`Options::staged`) rather than reach the peers' directly.
    pub staged: bool,
    /// Otherwise: reach them whatever the size (`Options::direct`), not only where it pays.
    pub direct: bool,
    /// CPU emulation, V forms over buffers the peers reach: `SnacArgs::direct_min_bytes` (0,
    /// a few KiB, or never), so that a sequence mixes passes and staged calls.
    pub direct_min_bytes: u64,
}

const KINDS: [CollectiveKind; 7] = CollectiveKind::ALL;

/// A size in elements of `size` bytes: empty, one, a few, around the latency window, around the
/// staging half, or up to `max_part`.
fn random_count(rng: &mut SmallRng, bands: &Bands, size: u64) -> u64 {
    let around = |rng: &mut SmallRng, b: u64| {
        let c = b / size;
        c.saturating_sub(2) + rng.random_range(0..5)
    };
    let count = match rng.random_range(0..10) {
        0 => 0,
        1 => 1,
        2 | 3 => rng.random_range(2..40),
        4 => around(rng, bands.window / 2),
        5 => around(rng, bands.window),
        6 => around(rng, bands.half / 4),
        7 => around(rng, bands.half),
        _ => rng.random_range(0..bands.max_part / size + 1),
    };
    count.min(bands.max_part / size)
}

fn random_plan(rng: &mut SmallRng, bands: &Bands, world: u32, blocks: u32) -> Plan {
    // From 1/1024 of a staging half (at least one 16-byte unit) to past a whole half.
    let unit = (bands.half / 1024).max(16);
    let chunks = [unit, 4 * unit, 16 * unit, 64 * unit, 256 * unit, 4 << 20];
    Plan {
        put_blocks: rng.random_range(1..=blocks.max(1)),
        chunk_bytes: chunks[rng.random_range(0..chunks.len())],
        latency_threshold: [0, bands.window / 4, bands.window, u64::MAX][rng.random_range(0..4)],
        two_shot_min_bytes: [0, 256, bands.window / 2][rng.random_range(0..3)],
        two_shot_min_world: rng.random_range(2..=world.max(2) + 1),
        ..Plan::DEFAULT
    }
}

impl Step {
    /// A random call on `world` ranks.
    pub fn random(rng: &mut SmallRng, world: u32, bands: &Bands, knobs: &Knobs) -> Self {
        let kind = KINDS[rng.random_range(0..KINDS.len())];
        let dtype = if kind.reduces() {
            DataType::ALL[rng.random_range(0..DataType::ALL.len())]
        } else {
            [DataType::E4m3, DataType::Bf16, DataType::F32][rng.random_range(0..3)]
        };
        let op = ReduceOpKind::ALL[rng.random_range(0..ReduceOpKind::ALL.len())];
        let size = dtype.size() as u64;
        let w = world as usize;
        let (count, counts) = match kind {
            CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => (
                0,
                vec![(0..w).map(|_| random_count(rng, bands, size)).collect()],
            ),
            CollectiveKind::AllToAllV => (
                0,
                (0..w)
                    .map(|_| (0..w).map(|_| random_count(rng, bands, size)).collect())
                    .collect(),
            ),
            _ => (random_count(rng, bands, size), Vec::new()),
        };
        let blocks = rng.random_range(1..=knobs.max_blocks);
        let threads = knobs.threads[rng.random_range(0..knobs.threads.len())];
        let plan = knobs
            .random_plan
            .then(|| random_plan(rng, bands, world, blocks));
        let algorithm = match rng.random_range(0..6) {
            0 => Some(Algorithm::OneShot),
            1 => Some(Algorithm::TwoShot),
            2 => Some(Algorithm::Throughput),
            _ => None,
        };
        let mode = if rng.random_bool(0.5) {
            ReductionMode::Deterministic
        } else {
            ReductionMode::Default
        };
        let staged = rng.random_bool(0.3);
        Self {
            kind,
            dtype,
            op,
            count,
            counts,
            blocks,
            threads,
            plan,
            runtime_op: rng.random_bool(0.5),
            algorithm: (kind == CollectiveKind::AllReduce)
                .then_some(algorithm)
                .flatten(),
            mode,
            staged,
            direct: !staged && rng.random_bool(0.4),
            direct_min_bytes: [0, 1 << 10, 8 << 10, u64::MAX][rng.random_range(0..4)],
        }
    }

    /// Bytes per element.
    pub fn size(&self) -> usize {
        self.dtype.size()
    }

    /// The plan with the step's algorithm and mode applied (when it has one).
    pub fn effective_plan(&self) -> Option<Plan> {
        self.plan.map(|mut p| {
            if let Some(a) = self.algorithm {
                p.algorithm = a as u32;
            }
            p.mode = self.mode as u32;
            p
        })
    }

    /// The counts rank `rank` holds in device memory (V collectives): `world` for AllGatherV
    /// and ReduceScatterV, `2 × world` (sent to each, received from each) for AllToAllV.
    pub fn device_counts(&self, world: u32, rank: u32) -> Vec<u64> {
        let w = world as usize;
        match self.kind {
            CollectiveKind::AllToAllV => {
                let r = rank as usize;
                let mut c: Vec<u64> = self.counts[r].clone();
                c.extend((0..w).map(|p| self.counts[p][r]));
                c
            }
            _ => self.counts.first().cloned().unwrap_or_default(),
        }
    }

    /// The largest count of any part (the V collectives' `max_count`).
    pub fn max_count(&self) -> u64 {
        self.counts
            .iter()
            .flatten()
            .copied()
            .max()
            .unwrap_or(self.count)
    }

    /// Bytes of rank `rank`'s input and output.
    pub fn lens(&self, world: u32, rank: u32) -> (usize, usize) {
        let (w, r, s) = (world as usize, rank as usize, self.size());
        let n = self.count as usize * s;
        match self.kind {
            CollectiveKind::AllReduce => (n, n),
            CollectiveKind::AllGather => (n, w * n),
            CollectiveKind::ReduceScatter => (w * n, n),
            CollectiveKind::AllToAll => (w * n, w * n),
            CollectiveKind::AllGatherV => {
                let c = &self.counts[0];
                (c[r] as usize * s, c.iter().sum::<u64>() as usize * s)
            }
            CollectiveKind::ReduceScatterV => {
                let c = &self.counts[0];
                (c.iter().sum::<u64>() as usize * s, c[r] as usize * s)
            }
            CollectiveKind::AllToAllV => (
                self.counts[r].iter().sum::<u64>() as usize * s,
                (0..w).map(|p| self.counts[p][r]).sum::<u64>() as usize * s,
            ),
        }
    }

    /// Fresh inputs for every rank.
    pub fn inputs(&self, rng: &mut SmallRng, world: u32) -> Vec<Vec<u8>> {
        (0..world)
            .map(|r| {
                let len = self.lens(world, r).0;
                if self.kind.reduces() {
                    random_elements(rng, self.dtype, self.op, len / self.size())
                } else {
                    (0..len).map(|_| rng.random::<u8>()).collect()
                }
            })
            .collect()
    }

    /// Rank `rank`'s output as the reference computes it; for reductions, also the parts it
    /// reduced (for the f64 check).
    fn reference(&self, inputs: &[Vec<u8>], rank: u32) -> (Vec<u8>, Vec<Vec<u8>>) {
        let world = inputs.len();
        let (r, s) = (rank as usize, self.size());
        let n = self.count as usize * s;
        let reduce = |parts: Vec<Vec<u8>>| {
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let out = if refs.first().is_some_and(|p| !p.is_empty()) {
                reference_f32(self.dtype, self.op, &refs)
            } else {
                Vec::new()
            };
            (out, parts)
        };
        match self.kind {
            CollectiveKind::AllReduce => reduce(inputs.to_vec()),
            CollectiveKind::ReduceScatter => reduce(
                inputs
                    .iter()
                    .map(|v| v[r * n..(r + 1) * n].to_vec())
                    .collect(),
            ),
            CollectiveKind::AllGather | CollectiveKind::AllGatherV => (inputs.concat(), vec![]),
            CollectiveKind::AllToAll => (
                (0..world)
                    .flat_map(|p| inputs[p][r * n..(r + 1) * n].to_vec())
                    .collect(),
                vec![],
            ),
            CollectiveKind::ReduceScatterV => {
                let c = &self.counts[0];
                let at: usize = c[..r].iter().sum::<u64>() as usize * s;
                let len = c[r] as usize * s;
                reduce(inputs.iter().map(|v| v[at..at + len].to_vec()).collect())
            }
            CollectiveKind::AllToAllV => {
                let mut out = Vec::new();
                for (p, input) in inputs.iter().enumerate() {
                    let at: usize = self.counts[p][..r].iter().sum::<u64>() as usize * s;
                    let len = self.counts[p][r] as usize * s;
                    out.extend_from_slice(&input[at..at + len]);
                }
                (out, vec![])
            }
        }
    }

    /// Checks rank `rank`'s output buffer (`got`: the output then [`GUARD`] guard bytes).
    pub fn check(&self, inputs: &[Vec<u8>], rank: u32, got: &[u8]) -> Result<(), String> {
        let (want, parts) = self.reference(inputs, rank);
        let len = want.len();
        if got.len() < len + GUARD {
            return Err(format!(
                "output holds {} bytes, {} expected",
                got.len(),
                len + GUARD
            ));
        }
        if let Some(at) = got[len..len + GUARD].iter().position(|&b| b != POISON) {
            return Err(format!("guard byte {at} after the output was written"));
        }
        if got[..len] != want[..] {
            let s = self.size();
            let first = (0..len).find(|&i| got[i] != want[i]).unwrap_or(0);
            let wrong = (0..len / s.max(1))
                .filter(|i| got[i * s..(i + 1) * s] != want[i * s..(i + 1) * s])
                .count();
            return Err(format!(
                "{wrong} of {} elements differ from the reference (first at byte {first})",
                len / s.max(1)
            ));
        }
        if !parts.is_empty() && len > 0 {
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let wrong = count_wrong_f64(self.dtype, self.op, &refs, &got[..len]);
            if wrong != 0 {
                return Err(format!("{wrong} elements outside the f64 tolerance"));
            }
        }
        Ok(())
    }

    /// A short description for failure messages.
    pub fn describe(&self) -> String {
        let sizes = if self.kind.is_v() {
            format!("counts {:?}", self.counts)
        } else {
            format!("count {}", self.count)
        };
        format!(
            "{} {:?} {:?} {sizes} blocks {} threads {} plan {:?} algorithm {:?} mode {:?}{}{}",
            self.kind.name(),
            self.dtype,
            self.op,
            self.blocks,
            self.threads,
            self.plan,
            self.algorithm,
            self.mode,
            if self.runtime_op { " (_op form)" } else { "" },
            if self.staged {
                " staged"
            } else if self.direct {
                " direct"
            } else {
                ""
            },
        )
    }
}
