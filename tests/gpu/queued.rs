//! Queued calls on the virtual node, as a training loop makes them: every rank enqueues a random
//! sequence of collectives (every kind, sizes from 0 to tens of MiB, the table's plans or random
//! ones, block counts changing from call to call) on its own stream and synchronises once at
//! the end; then every output of every call is checked against the host reference (the same
//! generator and checker as the CPU suite's `cpu_sequences`, guard bytes included).
//!
//! Also: a mixed sequence captured into one CUDA graph per rank and replayed 20 times with fresh
//! inputs, and 10 000 small mixed calls back to back on eight ranks.

use crate::support::{capture_graph, virtual_node, virtual_node_failures};
use cudarc::driver::{CudaSlice, CudaStream};
use purlin::collective::{self, CollectiveKind, Counts, Options};
use purlin::memory::Span;
use purlin::workspace::WorkspaceRequirements;
use purlin::{Context, Gpu};
use purlin_tests::sequence::{Bands, GUARD, Knobs, Step};
use purlin_tests::{POISON, fresh_rng};
use rand::RngExt;
use rand::rngs::SmallRng;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One rank's buffers of one call.
struct CallBuffers {
    src: CudaSlice<u8>,
    dst: CudaSlice<u8>,
    counts: CudaSlice<u64>,
    dst_len: usize,
}

fn upload(stream: &Arc<CudaStream>, bytes: &[u8]) -> CudaSlice<u8> {
    let mut v = bytes.to_vec();
    v.resize(bytes.len().max(16), 0);
    stream.clone_htod(&v).unwrap()
}

fn buffers(
    stream: &Arc<CudaStream>,
    step: &Step,
    world: u32,
    rank: u32,
    input: &[u8],
) -> CallBuffers {
    let dst_len = step.lens(world, rank).1;
    let mut counts = step.device_counts(world, rank);
    counts.resize(counts.len().max(1), 0);
    CallBuffers {
        src: upload(stream, input),
        dst: upload(stream, &vec![POISON; dst_len + GUARD]),
        counts: stream.clone_htod(&counts).unwrap(),
        dst_len,
    }
}

/// Launches one step on this rank with the public raw API (the table's plan unless the step
/// carries its own).
fn launch(
    ctx: &Context,
    stream: &Arc<CudaStream>,
    step: &Step,
    b: &CallBuffers,
) -> purlin::Result<()> {
    let src = Span::from_device(&b.src, stream);
    // The output span is what the call writes; the guard bytes after it stay outside.
    let dst = Span::new(
        Span::from_device(&b.dst, stream).addr,
        b.dst_len.max(1) as u64,
    );
    let counts = Span::from_device(&b.counts, stream).addr;
    // SAFETY: every buffer holds what the step moves (its sizes come from the same step), and
    // all of them outlive the synchronisation at the end of the sequence.
    unsafe { launch_spans(ctx, step, src, dst, counts, true) }
}

/// Launches one step on device ranges: `counts` the address of its V counts; `own_plan`
/// whether a step that carries a plan uses it (else the table's).
///
/// # Safety
/// As the `*_raw` collectives: the ranges hold what the step moves until it has run.
unsafe fn launch_spans(
    ctx: &Context,
    step: &Step,
    src: Span,
    dst: Span,
    counts: u64,
    own_plan: bool,
) -> purlin::Result<()> {
    let options = Options {
        mode: step.mode,
        algorithm: step.algorithm,
        choice: step
            .plan
            .filter(|_| own_plan)
            .map(|plan| purlin_tuning::Choice {
                blocks: step.blocks,
                plan,
            }),
        staged: step.staged,
        direct: step.direct,
        ..Options::default()
    };
    let (dtype, op, count) = (step.dtype, step.op, step.count);
    let counts = Counts {
        addr: counts,
        max_count: step.max_count(),
    };
    use collective::{all_gather_raw as ag, all_reduce_raw as ar, all_to_all_raw as a2a};
    use collective::{all_gather_v_raw as agv, all_to_all_v_raw as a2av};
    use collective::{reduce_scatter_raw as rs, reduce_scatter_v_raw as rsv};
    let o = &options;
    // SAFETY: forwarded contract.
    unsafe {
        match step.kind {
            CollectiveKind::AllReduce => ar(ctx, dtype, op, dst, src, count, o),
            CollectiveKind::AllGather => ag(ctx, dtype, dst, src, count, o),
            CollectiveKind::ReduceScatter => rs(ctx, dtype, op, dst, src, count, o),
            CollectiveKind::AllToAll => a2a(ctx, dtype, dst, src, count, o),
            CollectiveKind::AllGatherV => agv(ctx, dtype, dst, src, counts, o),
            CollectiveKind::ReduceScatterV => rsv(ctx, dtype, op, dst, src, counts, o),
            CollectiveKind::AllToAllV => a2av(ctx, dtype, dst, src, counts, o),
        }
    }
}

/// How a sequence's buffers are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Uploads {
    /// Every call's buffers are allocated and filled before the first call (one synchronise),
    /// so only collectives are queued.
    Before,
    /// Each call's buffers are allocated and filled (pageable host copies) right before its
    /// launch, interleaved with the collectives on the stream, as a simple training loop does.
    Interleaved,
    /// As `Interleaved`, but copied from page-locked host memory (filled before the first
    /// call), so no copy goes through the driver's staging buffers.
    InterleavedPinned,
}

/// A host slab of page-locked memory holding every call's input, poison and counts of one rank.
struct PinnedInputs {
    slab: cudarc::driver::PinnedHostSlice<u8>,
    /// Per call: (input offset, input bytes, counts offset, counts bytes).
    at: Vec<(usize, usize, usize, usize)>,
    /// Offset of `max_poison` poison bytes.
    poison_at: usize,
}

impl PinnedInputs {
    fn new(
        stream: &Arc<CudaStream>,
        steps: &[Step],
        inputs: &[Vec<Vec<u8>>],
        world: u32,
        r: u32,
    ) -> Self {
        let mut host = Vec::new();
        let mut at = Vec::new();
        let mut max_dst = 0;
        for (step, input) in steps.iter().zip(inputs) {
            let src = &input[r as usize];
            let (i, n) = (host.len(), src.len());
            host.extend_from_slice(src);
            host.resize(host.len().next_multiple_of(16) + 16, 0);
            let counts: Vec<u8> = step
                .device_counts(world, r)
                .iter()
                .flat_map(|c| c.to_le_bytes())
                .collect();
            let (c, cn) = (host.len(), counts.len());
            host.extend_from_slice(&counts);
            host.resize(host.len().next_multiple_of(16) + 16, 0);
            at.push((i, n, c, cn));
            max_dst = max_dst.max(step.lens(world, r).1 + GUARD);
        }
        let poison_at = host.len();
        host.resize(host.len() + max_dst, POISON);
        // SAFETY: filled right below, before any copy reads it.
        let mut slab = unsafe {
            stream
                .context()
                .alloc_pinned_with_flags::<u8>(host.len(), 0)
        }
        .unwrap();
        slab.as_mut_slice().unwrap().copy_from_slice(&host);
        Self {
            slab,
            at,
            poison_at,
        }
    }

    /// Call `i`'s buffers, allocated on the stream and filled from the slab.
    fn buffers(
        &self,
        stream: &Arc<CudaStream>,
        step: &Step,
        world: u32,
        r: u32,
        i: usize,
        timeline: &mut Timeline,
    ) -> CallBuffers {
        let (src_at, src_len, counts_at, counts_len) = self.at[i];
        let mut mark = |what: &str| {
            if i < 3 {
                timeline.mark(format!("call {i} {what}"));
            }
        };
        let dst_len = step.lens(world, r).1;
        // SAFETY: page-locked, filled before the sequence and never written again; it outlives
        // the synchronise at the end of the sequence.
        let host =
            unsafe { std::slice::from_raw_parts(self.slab.as_ptr().unwrap(), self.slab.len()) };
        mark("slab pointer");
        // SAFETY: each buffer is filled by the copy queued right after its allocation.
        let (mut src, mut dst, mut counts) = unsafe {
            (
                stream.alloc::<u8>(src_len.max(16)).unwrap(),
                stream.alloc::<u8>(dst_len + GUARD).unwrap(),
                stream.alloc::<u64>((counts_len / 8).max(1)).unwrap(),
            )
        };
        mark("allocated");
        let copy = |dst: u64, bytes: &[u8]| {
            if !bytes.is_empty() {
                // SAFETY: `dst` holds at least `bytes.len()` bytes; `bytes` is page-locked.
                unsafe {
                    cudarc::driver::result::memcpy_htod_async(dst, bytes, stream.cu_stream())
                }
                .unwrap();
            }
        };
        copy(
            Span::from_device(&src, stream).addr,
            &host[src_at..src_at + src_len.max(16)],
        );
        copy(
            Span::from_device(&dst, stream).addr,
            &host[self.poison_at..self.poison_at + dst_len + GUARD],
        );
        mark("input and poison copies queued");
        copy(
            Span::from_device(&counts, stream).addr,
            &host[counts_at..counts_at + counts_len],
        );
        let _ = (&mut src, &mut dst, &mut counts);
        CallBuffers {
            src,
            dst,
            counts,
            dst_len,
        }
    }
}

/// When a rank's host thread reached each stage of a sequence, from an origin all ranks share.
struct Timeline {
    origin: Instant,
    marks: Vec<(String, Duration)>,
}

impl Timeline {
    fn new(origin: Instant) -> Self {
        let mut t = Self {
            origin,
            marks: Vec::new(),
        };
        t.mark("context made");
        t
    }

    fn mark(&mut self, what: impl Into<String>) {
        self.marks.push((what.into(), self.origin.elapsed()));
    }
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host timeline:")?;
        for (what, at) in &self.marks {
            write!(f, " {what} {:.1} ms,", at.as_secs_f64() * 1e3)?;
        }
        Ok(())
    }
}

/// What one rank saw of a sequence.
#[derive(Debug)]
enum Outcome {
    /// Every output matched its reference.
    Matched,
    /// The library reported an error (a launch refused, a fault at the synchronise).
    Failed(String),
    /// The calls reported success, but outputs differ from their references.
    Wrong(Vec<String>),
}

/// Runs one sequence on `world` ranks; returns every rank's outcome.
fn sequence(
    gpu: &Arc<Gpu>,
    world: u32,
    req: WorkspaceRequirements,
    steps: &[Step],
    inputs: &[Vec<Vec<u8>>],
    uploads: Uploads,
) -> Vec<Outcome> {
    // When each rank's host reached each stage, from one origin: a failure prints them, so a
    // rank whose set-up or launch was late (a driver call that blocked it) shows where.
    let origin = Instant::now();
    virtual_node(gpu, world, req, |ctx, stream| {
        ctx.set_timeout(Duration::from_secs(5));
        let r = ctx.rank();
        let mut timeline = Timeline::new(origin);
        let mut bufs = Vec::with_capacity(steps.len());
        let pinned = (uploads == Uploads::InterleavedPinned)
            .then(|| PinnedInputs::new(stream, steps, inputs, world, r));
        if uploads == Uploads::Before {
            for (step, input) in steps.iter().zip(inputs) {
                bufs.push(buffers(stream, step, world, r, &input[r as usize]));
            }
        }
        timeline.mark("set-up queued");
        stream.synchronize().unwrap();
        timeline.mark("set-up done");
        // The longest a rank's host thread spent making one call's buffers: a driver call that
        // blocks the host while peers wait for this rank's next launch shows up here.
        let mut blocked = (Duration::ZERO, 0);
        // The longest one launch took on the host (a launch that blocks shows up here).
        let mut longest_launch = (Duration::ZERO, 0);
        for (i, step) in steps.iter().enumerate() {
            let start = Instant::now();
            match &pinned {
                Some(p) => bufs.push(p.buffers(stream, step, world, r, i, &mut timeline)),
                None if uploads == Uploads::Interleaved => {
                    bufs.push(buffers(stream, step, world, r, &inputs[i][r as usize]))
                }
                None => {}
            }
            if start.elapsed() > blocked.0 {
                blocked = (start.elapsed(), i);
            }
            if i < 3 {
                timeline.mark(format!("call {i} buffers made"));
            }
            let launched = Instant::now();
            let result = launch(ctx, stream, step, &bufs[i]);
            if launched.elapsed() > longest_launch.0 {
                longest_launch = (launched.elapsed(), i);
            }
            if let Err(e) = result {
                let _ = ctx.synchronize();
                return Outcome::Failed(format!(
                    "rank {r}: call {i} ({}) refused: {e}; {timeline}",
                    step.describe()
                ));
            }
            if i < 3 {
                timeline.mark(format!("call {i} launched"));
            }
        }
        timeline.mark("all launched");
        let host_note = format!(
            "longest buffer set-up on the host: {:?} before call {}; longest launch: {:?} \
             (call {}); {timeline}",
            blocked.0, blocked.1, longest_launch.0, longest_launch.1
        );
        if let Err(e) = ctx.synchronize() {
            return Outcome::Failed(format!("rank {r}: {e}; {host_note}"));
        }
        if blocked.0 > Duration::from_millis(500) {
            println!("rank {r}: {host_note}");
        }
        let mut errors = Vec::new();
        for (i, (step, b)) in steps.iter().zip(&bufs).enumerate() {
            let got = stream.clone_dtoh(&b.dst).unwrap();
            if let Err(e) = step.check(&inputs[i], r, &got) {
                errors.push(format!("rank {r}: call {i} ({}): {e}", step.describe()));
            }
        }
        if errors.is_empty() {
            Outcome::Matched
        } else {
            Outcome::Wrong(errors)
        }
    })
}

/// Steps and, per step, every rank's input.
type Sequence = (Vec<Step>, Vec<Vec<Vec<u8>>>);

fn random_sequence(
    rng: &mut SmallRng,
    world: u32,
    calls: usize,
    bands: &Bands,
    knobs: &Knobs,
) -> Sequence {
    let steps: Vec<Step> = (0..calls)
        .map(|_| Step::random(rng, world, bands, knobs))
        .collect();
    let inputs = steps.iter().map(|s| s.inputs(rng, world)).collect();
    (steps, inputs)
}

/// The two workspaces the sequences run on: the default one (every size resident in staging)
/// and the small one (1 MiB halves: cyclic staging from 1 MiB), with the sizes drawn around them.
fn configs(world: u32) -> [(WorkspaceRequirements, Bands); 2] {
    let small = WorkspaceRequirements::small();
    let large = WorkspaceRequirements::default();
    [
        (
            large,
            Bands {
                half: large.staging_half_bytes,
                window: large.latency_window_bytes,
                max_part: (12 << 20) / world as u64,
            },
        ),
        (
            small,
            Bands {
                half: small.staging_half_bytes,
                window: small.latency_window_bytes,
                max_part: (7 << 19) / world as u64 * 2,
            },
        ),
    ]
}

/// What a queued test requires of every rank of every sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Every output matches.
    AllMatch,
    /// Every rank either matches everywhere or reports an error: never success with a wrong
    /// output, never a hang.
    MatchOrFailLoudly,
}

fn queued(
    name: &str,
    uploads: Uploads,
    worlds: &[u32],
    configs_used: usize,
    plans: &[bool],
    expect: Expect,
) {
    let gpu = gpu_or_return!(name);
    let mut rng = fresh_rng(name);
    let start = Instant::now();
    let (mut calls, mut outputs, mut failed_sequences) = (0, 0, 0);
    let mut failures = Vec::new();
    // PURLIN_QUEUED_WORLDS=2,4 narrows the worlds (to repeat one that failed).
    let only: Option<Vec<u32>> = std::env::var("PURLIN_QUEUED_WORLDS")
        .ok()
        .map(|v| v.split(',').filter_map(|w| w.trim().parse().ok()).collect());
    for &world in worlds {
        if only.as_ref().is_some_and(|o| !o.contains(&world)) {
            continue;
        }
        for (req, bands) in configs(world).into_iter().take(configs_used) {
            for &random_plan in plans {
                let knobs = Knobs {
                    threads: &[1],
                    max_blocks: 32,
                    random_plan,
                };
                let n = rng.random_range(25..=40);
                let (steps, inputs) = random_sequence(&mut rng, world, n, &bands, &knobs);
                let outcomes = sequence(&gpu, world, req, &steps, &inputs, uploads);
                calls += n;
                outputs += n * world as usize;
                let what = format!(
                    "world {world} half {} random plans {random_plan}",
                    bands.half
                );
                let failed: Vec<&String> = outcomes
                    .iter()
                    .filter_map(|o| match o {
                        Outcome::Failed(e) => Some(e),
                        _ => None,
                    })
                    .collect();
                let wrong: Vec<&String> = outcomes
                    .iter()
                    .filter_map(|o| match o {
                        Outcome::Wrong(e) => e.first(),
                        _ => None,
                    })
                    .collect();
                println!(
                    "{name}: {what}: {n} calls, {} ranks matched, {} failed, {} wrong{}",
                    outcomes.len() - failed.len() - wrong.len(),
                    failed.len(),
                    wrong.len(),
                    failed
                        .iter()
                        .chain(&wrong)
                        .take(3)
                        .map(|e| format!(" | {e}"))
                        .collect::<String>()
                );
                failed_sequences += usize::from(!failed.is_empty());
                let bad = !wrong.is_empty() || (expect == Expect::AllMatch && !failed.is_empty());
                if bad {
                    failures.push(format!("{what}: {:?}", &outcomes[..outcomes.len().min(4)]));
                }
            }
        }
    }
    println!(
        "{name}: {calls} queued calls, {outputs} outputs checked in {:?}; sequences with an error: {failed_sequences}",
        start.elapsed()
    );
    assert!(failures.is_empty(), "{name}: {failures:#?}");
}

#[test]
fn queued_mixed_sequences_match_their_references() {
    queued(
        "gpu queued sequences (buffers made first)",
        Uploads::Before,
        &[2, 4, 8],
        2,
        &[false, true],
        Expect::AllMatch,
    );
}

/// Pageable uploads between queued calls block a rank's host thread in the driver until its
/// stream drains, which can wait for a peer's kernel that waits for this rank (see the host
/// crate's `collective` docs, "Host calls that wait for the GPU"): every rank must then report
/// an error, none may report success with a wrong output, and nothing may hang.
#[test]
fn pageable_uploads_between_queued_calls_fail_loudly_or_match() {
    queued(
        "gpu queued sequences (pageable uploads interleaved)",
        Uploads::Interleaved,
        &[2, 8],
        1,
        &[false],
        Expect::MatchOrFailLoudly,
    );
}

#[test]
fn queued_mixed_sequences_with_interleaved_pinned_uploads_match_their_references() {
    queued(
        "gpu queued sequences (pinned uploads interleaved)",
        Uploads::InterleavedPinned,
        &[2, 8],
        1,
        &[false],
        Expect::AllMatch,
    );
}

/// A mixed sequence of fixed-size and V calls captured into one graph per rank and replayed 20
/// times, with fresh inputs (and fresh V counts within the same bounds) before each replay.
#[test]
fn a_captured_mixed_sequence_replays_20_times_with_fresh_inputs() {
    let gpu = gpu_or_return!("queued graph replay");
    let mut rng = fresh_rng("gpu queued graph replay");
    let world = 4u32;
    let (req, bands) = configs(world)[1];
    let knobs = Knobs {
        threads: &[1],
        max_blocks: 16,
        random_plan: true,
    };
    let (steps, _) = random_sequence(&mut rng, world, 24, &bands, &knobs);
    // Each replay: the same kinds and fixed sizes; V counts redrawn no larger than the
    // captured ones' buffers allow (each count at most the captured one).
    let replays: Vec<Sequence> = (0..20)
        .map(|_| {
            let redrawn: Vec<Step> = steps
                .iter()
                .map(|s| {
                    let mut s = s.clone();
                    for row in &mut s.counts {
                        for c in row.iter_mut() {
                            *c = rng.random_range(0..=*c);
                        }
                    }
                    s
                })
                .collect();
            let inputs = redrawn.iter().map(|s| s.inputs(&mut rng, world)).collect();
            (redrawn, inputs)
        })
        .collect();
    let failures: Vec<String> = virtual_node_failures(&gpu, world, req, |ctx, stream| {
        ctx.set_timeout(Duration::from_secs(5));
        let r = ctx.rank();
        // Buffers sized for the captured (largest) counts.
        let mut bufs: Vec<CallBuffers> = steps
            .iter()
            .map(|s| {
                let len = s.lens(world, r).0;
                buffers(stream, s, world, r, &vec![0u8; len])
            })
            .collect();
        stream.synchronize().unwrap();
        let (graph, captured): (_, purlin::Result<()>) = capture_graph(stream, || {
            steps
                .iter()
                .zip(&bufs)
                .try_for_each(|(s, b)| launch(ctx, stream, s, b))
        });
        if let Err(e) = captured {
            return vec![format!("rank {r}: capture failed: {e}")];
        }
        let mut errors = Vec::new();
        for (it, (redrawn, inputs)) in replays.iter().enumerate() {
            for ((s, b), input) in redrawn.iter().zip(bufs.iter_mut()).zip(inputs) {
                let mut src = input[r as usize].clone();
                src.resize(src.len().max(16), 0);
                stream
                    .memcpy_htod(&src, &mut b.src.slice_mut(..src.len()))
                    .unwrap();
                let mut counts = s.device_counts(world, r);
                counts.resize(counts.len().max(1), 0);
                stream.memcpy_htod(&counts, &mut b.counts).unwrap();
                let poison = vec![POISON; b.dst.len()];
                stream.memcpy_htod(&poison, &mut b.dst).unwrap();
                b.dst_len = s.lens(world, r).1;
            }
            graph.launch().unwrap();
            if let Err(e) = ctx.synchronize() {
                return vec![format!("rank {r} replay {it}: {e}")];
            }
            for (i, (s, b)) in redrawn.iter().zip(&bufs).enumerate() {
                let got = stream.clone_dtoh(&b.dst).unwrap();
                // Past this replay's output the captured buffer still holds poison: check the
                // output and the guard after it.
                if let Err(e) = s.check(&inputs[i], r, &got) {
                    errors.push(format!(
                        "rank {r} replay {it} call {i} ({}): {e}",
                        s.describe()
                    ));
                }
            }
        }
        errors
    });
    println!("queued graph replays: 20 replays x 24 calls x {world} ranks checked");
    assert!(failures.is_empty(), "{failures:#?}");
}

/// 10 000 small mixed calls on eight ranks, back to back, one synchronise; every output
/// checked. Buffers are carved out of one slab per rank so that only collectives are queued.
#[test]
fn ten_thousand_small_mixed_calls_back_to_back() {
    let gpu = gpu_or_return!("ten thousand small calls");
    let mut rng = fresh_rng("gpu ten thousand small calls");
    let world = 8u32;
    let calls = 10_000usize;
    let bands = Bands {
        half: 1 << 20,
        window: 64 << 10,
        max_part: 2048,
    };
    let knobs = Knobs {
        threads: &[1],
        max_blocks: 8,
        random_plan: false,
    };
    let (steps, inputs) = random_sequence(&mut rng, world, calls, &bands, &knobs);
    let align = |n: usize| (n + GUARD).div_ceil(256) * 256;
    let start = Instant::now();
    let failures: Vec<String> = virtual_node_failures(
        &gpu,
        world,
        WorkspaceRequirements::small(),
        |ctx, stream| {
            ctx.set_timeout(Duration::from_secs(5));
            let r = ctx.rank();
            // Offsets of every call's input, output and counts in this rank's slabs.
            let (mut src_at, mut dst_at, mut counts_at) = (Vec::new(), Vec::new(), Vec::new());
            let (mut src_host, mut counts_host) = (Vec::new(), Vec::<u64>::new());
            let mut dst_total = 0usize;
            for (i, s) in steps.iter().enumerate() {
                let (sl, dl) = s.lens(world, r);
                src_at.push(src_host.len());
                src_host.extend_from_slice(&inputs[i][r as usize]);
                src_host.resize(src_host.len() + align(sl) - sl, 0);
                dst_at.push(dst_total);
                dst_total += align(dl);
                counts_at.push(counts_host.len());
                counts_host.extend(s.device_counts(world, r));
            }
            counts_host.push(0);
            let src = stream.clone_htod(&src_host).unwrap();
            let dst = stream.clone_htod(&vec![POISON; dst_total]).unwrap();
            let counts = stream.clone_htod(&counts_host).unwrap();
            stream.synchronize().unwrap();
            let (s_base, d_base, c_base) = (
                Span::from_device(&src, stream).addr,
                Span::from_device(&dst, stream).addr,
                Span::from_device(&counts, stream).addr,
            );
            for (i, s) in steps.iter().enumerate() {
                let (sl, dl) = s.lens(world, r);
                let (sp, dp) = (
                    Span::new(s_base + src_at[i] as u64, sl.max(1) as u64),
                    Span::new(d_base + dst_at[i] as u64, dl.max(1) as u64),
                );
                // SAFETY: the spans lie inside this rank's slabs, which outlive the synchronise.
                let launched = unsafe {
                    launch_spans(ctx, s, sp, dp, c_base + counts_at[i] as u64 * 8, false)
                };
                if let Err(e) = launched {
                    return vec![format!("rank {r}: call {i} refused: {e}")];
                }
            }
            if let Err(e) = ctx.synchronize() {
                return vec![format!("rank {r}: {e}")];
            }
            let got = stream.clone_dtoh(&dst).unwrap();
            let mut errors = Vec::new();
            for (i, s) in steps.iter().enumerate() {
                let dl = s.lens(world, r).1;
                if let Err(e) = s.check(&inputs[i], r, &got[dst_at[i]..dst_at[i] + dl + GUARD]) {
                    errors.push(format!("rank {r}: call {i} ({}): {e}", s.describe()));
                }
            }
            errors
        },
    );
    println!(
        "{calls} small mixed calls x {world} ranks back to back checked in {:?}",
        start.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} errors, first: {:#?}",
        failures.len(),
        &failures[..failures.len().min(8)]
    );
}

/// Small calls on sm_90 and later let the next call on their stream start early (programmatic
/// dependent launch) only where two of a rank's calls fit the GPU beside every other rank's;
/// `Options::strict_order` and large calls never do. (The queued tests above run with the
/// default, so their sequences of small calls overlap their launches.)
#[test]
fn small_calls_overlap_their_launches_only_where_two_fit() {
    let gpu = gpu_or_return!("overlapping launches");
    let overlaps = gpu.arch().compute_capability() >= 90;
    for world in [1u32, 2, 8] {
        let failures = virtual_node_failures(
            &gpu,
            world,
            WorkspaceRequirements::small(),
            |ctx, _| {
                let mut errors = Vec::new();
                let mut overlapping = 0;
                let strict = Options {
                    strict_order: true,
                    ..Default::default()
                };
                for kind in CollectiveKind::ALL {
                    for bytes in [256u64, 4096, 64 << 20] {
                        let (shape, plan) = ctx.plan(kind, bytes, &Options::default()).unwrap();
                        let lean = shape.smem_bytes == purlin_device::snac::SNAC_SMEM_BYTES;
                        let fits = 2 * shape.blocks <= gpu.sm_count() / world;
                        let expected = u32::from(overlaps && lean && fits);
                        overlapping += plan.launch_dependents;
                        if plan.launch_dependents != expected {
                            errors.push(format!(
                            "world {world} {kind:?} {bytes} B: launch_dependents {} (lean {lean}, {} blocks)",
                            plan.launch_dependents, shape.blocks
                        ));
                        }
                        let (_, plan) = ctx.plan(kind, bytes, &strict).unwrap();
                        if plan.launch_dependents != 0 {
                            errors.push(format!(
                                "world {world} {kind:?} {bytes} B: strict order overlaps"
                            ));
                        }
                    }
                }
                // The queued tests exercise overlapping launches only if small calls overlap.
                if overlaps && overlapping == 0 {
                    errors.push(format!("world {world}: no call overlaps its launch"));
                }
                errors
            },
        );
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
