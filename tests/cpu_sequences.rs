//! Queued calls on the CPU emulation: every rank runs its own queue of random collective calls
//! back to back, as a GPU stream does, with no join between calls, so a fast rank is already in
//! call `i + 1` (or later) while a slow one is still in call `i`. Kinds, sizes (from 0 to past
//! several staging halves), regimes, algorithms, block counts, threads per block and plans
//! change from call to call; every output of every call is checked against an independent
//! reference after the whole queue ran, outputs are poisoned and guard bytes follow each one.
//!
//! The seed is printed; `PURLIN_TEST_SEED=<seed>` replays a run, and
//! `PURLIN_SEQUENCE_CASES=<n>` runs more (or fewer) sequences.

use purlin_device::emulation::{Buffer, Communicator, Launch, Queued, Schedule};
use purlin_tests::fresh_rng;
use purlin_tests::sequence::{Bands, GUARD, Knobs, Step};
use purlin_tests::{Buffers, POISON};
use rand::RngExt;
use rand::rngs::SmallRng;
use std::time::{Duration, Instant};

fn cases(default: usize) -> usize {
    std::env::var("PURLIN_SEQUENCE_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The emulation's launch for a step.
fn launch(step: &Step) -> Launch {
    let mut l = Launch::new(step.kind, step.count * step.size() as u64).typed(step.dtype, step.op);
    l.elem_bytes = step.size() as u32;
    l.blocks = step.blocks;
    l.threads = step.threads;
    l.runtime_op = step.runtime_op;
    l.direct_min_bytes = step.direct_min_bytes;
    // AllToAllV's pass is decided by its bound (`max_count × world`): a step that draws a
    // threshold passes the tight bound, so that both sides of it run.
    if step.direct_min_bytes != 0 && step.kind.is_v() {
        l.max_count = step.max_count();
    }
    if let Some(plan) = step.effective_plan() {
        l.plan = plan;
    }
    l
}

fn poisoned(len: usize) -> Buffer {
    let b = Buffer::zeroed(len + GUARD);
    b.fill(POISON);
    b
}

/// Runs one random sequence of `calls` calls on `world` ranks and checks every output; returns
/// the number of (call, rank) outputs checked.
fn sequence(
    rng: &mut SmallRng,
    world: u32,
    calls: usize,
    knobs: &Knobs,
    buffers: Buffers,
    what: &str,
) -> usize {
    let half = [1024u64, 4096, 16384][rng.random_range(0..3)];
    let window = [512u64, 2048, 8192][rng.random_range(0..3)];
    let comm = buffers
        .apply(
            Communicator::builder(world)
                .staging_half_bytes(half)
                .latency_window_bytes(window)
                .timeout(Duration::from_secs(20)),
        )
        .build()
        .unwrap();
    let bands = Bands {
        half,
        window,
        max_part: 3 * half + half / 2,
    };
    let steps: Vec<Step> = (0..calls)
        .map(|_| Step::random(rng, world, &bands, knobs))
        .collect();
    let inputs: Vec<Vec<Vec<u8>>> = steps.iter().map(|s| s.inputs(rng, world)).collect();
    // Buffers per call and rank: fresh for every call, as a training loop's are.
    let mut src = Vec::new();
    let mut dst = Vec::new();
    let mut counts = Vec::new();
    for (step, input) in steps.iter().zip(&inputs) {
        src.push(
            input
                .iter()
                .map(|i| Buffer::from_slice(i))
                .collect::<Vec<_>>(),
        );
        dst.push(
            (0..world)
                .map(|r| poisoned(step.lens(world, r).1))
                .collect::<Vec<_>>(),
        );
        counts.push(
            (0..world)
                .map(|r| Buffer::from_slice(&step.device_counts(world, r)))
                .collect::<Vec<_>>(),
        );
    }
    let queues: Vec<Vec<Queued>> = (0..world as usize)
        .map(|r| {
            steps
                .iter()
                .enumerate()
                .map(|(i, step)| Queued {
                    launch: launch(step),
                    src: &src[i][r],
                    dst: &dst[i][r],
                    counts: step.kind.is_v().then(|| &counts[i][r]),
                })
                .collect()
        })
        .collect();
    let schedule = Schedule {
        max_delay: Duration::from_micros([0, 20, 300][rng.random_range(0..3)]),
        seed: rng.random(),
    };
    let describe = |i: usize| {
        format!(
            "{what}: world {world} half {half} window {window} {buffers:?}, call {i} of {calls}: {}",
            steps[i].describe()
        )
    };
    if let Err(e) = comm.run_queued(&queues, &schedule) {
        let first = match &e {
            purlin_device::emulation::EmulationError::QueuedFaults(f) => {
                f.iter().map(|(i, _)| *i).min().unwrap_or(0)
            }
            _ => 0,
        };
        panic!("{}\n{e}", describe(first.min(calls - 1)));
    }
    let mut checked = 0;
    for (i, step) in steps.iter().enumerate() {
        for r in 0..world {
            if let Err(e) = step.check(&inputs[i], r, &dst[i][r as usize].bytes()) {
                panic!("{}: rank {r}: {e}", describe(i));
            }
            checked += 1;
        }
    }
    checked
}

/// Runs `default_cases` random sequences, each over the buffers `buffers` draws for its world.
fn run_over(
    name: &str,
    worlds: &[u32],
    default_cases: usize,
    knobs: Knobs,
    buffers: impl Fn(&mut SmallRng, u32) -> Buffers,
) {
    let mut rng = fresh_rng(name);
    let start = Instant::now();
    let (mut calls, mut outputs) = (0, 0);
    for case in 0..cases(default_cases) {
        let world = worlds[rng.random_range(0..worlds.len())];
        let n = rng.random_range(20..=100);
        let what = format!("{name} case {case}");
        let kind = buffers(&mut rng, world);
        outputs += sequence(&mut rng, world, n, &knobs, kind, &what);
        calls += n;
    }
    eprintln!(
        "{name}: {calls} queued calls, {outputs} outputs checked in {:?}",
        start.elapsed()
    );
}

fn run(name: &str, worlds: &[u32], default_cases: usize, knobs: Knobs) {
    run_over(name, worlds, default_cases, knobs, |_, _| Buffers::Ordinary);
}

/// Every kind mixed, sizes and plans changing from call to call, worlds 1 to 16.
#[test]
fn queued_mixed_sequences() {
    run(
        "queued_mixed_sequences",
        &[1, 2, 2, 3, 4, 4, 5, 7, 8, 8, 16],
        12,
        Knobs {
            threads: &[1, 1, 2],
            max_blocks: 5,
            random_plan: true,
        },
    );
}

/// Blocks of several threads (2, 4, 32 and 64), so the block-level paths of SNAC (broadcasts,
/// last arrivals, block waits, the size agreement) run with real barriers; with 64, block 0's
/// last warp checks the digests between sending and receiving on the packet paths.
#[test]
fn queued_sequences_with_block_threads() {
    run(
        "queued_sequences_with_block_threads",
        &[2, 3, 4],
        6,
        Knobs {
            threads: &[2, 4, 32, 64],
            max_blocks: 3,
            random_plan: true,
        },
    );
}

/// The default plan (what a user gets): the table's thresholds and chunks.
#[test]
fn queued_sequences_default_plan() {
    run(
        "queued_sequences_default_plan",
        &[2, 4, 8],
        6,
        Knobs {
            threads: &[1, 4],
            max_blocks: 4,
            random_plan: false,
        },
    );
}

/// Over symmetric buffers: the fixed-size calls above the packet paths run one pass over the
/// peers' buffers, mixed with the V calls and packet paths that stage, blocks of 1 or 2
/// threads (`tests/cpu_symmetric.rs` runs 64); a rank that left a call before its peers
/// finished with its buffers, or a call that ran past another's, would show as a wrong output of a later call.
#[test]
fn queued_sequences_over_symmetric_buffers() {
    run_over(
        "queued_sequences_over_symmetric_buffers",
        &[2, 3, 4, 8],
        6,
        Knobs {
            threads: &[1, 1, 2],
            max_blocks: 3,
            random_plan: true,
        },
        |_, _| Buffers::Symmetric,
    );
}

/// Over ordinary buffers the peers reach (ranks of one process): the calls above the packet
/// paths exchange their buffers' addresses at entry and run one pass over them, mixed with the
/// V calls and packet paths; one sequence in three names a rank whose buffers are out of
/// reach, so every call of it stages. A rank that left a call before its peers finished with
/// its buffers, or read a later call's addresses, would show as a wrong output.
#[test]
fn queued_sequences_over_reached_ordinary_buffers() {
    run_over(
        "queued_sequences_over_reached_ordinary_buffers",
        &[2, 3, 4, 8],
        6,
        Knobs {
            threads: &[1, 1, 2],
            max_blocks: 3,
            random_plan: true,
        },
        Buffers::reached,
    );
}
