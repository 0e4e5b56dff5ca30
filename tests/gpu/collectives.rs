//! The collectives on the virtual node: world 2, 4 and 8 ranks as threads of this process on
//! GPU 0, one stream each. Every result is compared bit for bit with a host reference (copies
//! exactly; reductions against the f32 rank-order reference every Purlin reduction matches),
//! outputs are poisoned first, inputs are fresh random data. Also: deterministic results across
//! plans and regimes, CUDA-graph capture replayed 100 times with fresh inputs (and new V counts),
//! the fused kernel against the host-launched collective, and the missing-rank timeout.

use crate::support::{
    assert_every_rank_passes, capture_graph, download, output_differs, poisoned, upload,
    virtual_node, virtual_node_failures,
};
use cudarc::driver::{CudaSlice, CudaStream};
use purlin::collective::{self, Algorithm, Counts, Options, ReductionMode};
use purlin::memory::Span;
use purlin::workspace::WorkspaceRequirements;
use purlin::{Context, DataType, Gpu, ReduceOpKind};
use purlin_tests::{POISON, fresh_rng, random_elements, random_elements_parallel, reference_f32};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

const WORLDS: [u32; 3] = [2, 4, 8];

fn span(buf: &CudaSlice<u8>, stream: &CudaStream) -> Span {
    Span::from_device(buf, stream)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Coll {
    Ar,
    Ag,
    Rs,
    A2a,
}

impl Coll {
    /// One raw call of the collective on spans, `count` elements per part (`op` is ignored by
    /// the copies).
    ///
    /// # Safety
    /// The spans hold what the call moves until it has run.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn raw(
        self,
        ctx: &Context,
        dtype: DataType,
        op: ReduceOpKind,
        d: Span,
        s: Span,
        count: u64,
        options: &Options,
    ) -> purlin::Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            match self {
                Coll::Ar => collective::all_reduce_raw(ctx, dtype, op, d, s, count, options),
                Coll::Ag => collective::all_gather_raw(ctx, dtype, d, s, count, options),
                Coll::Rs => collective::reduce_scatter_raw(ctx, dtype, op, d, s, count, options),
                Coll::A2a => collective::all_to_all_raw(ctx, dtype, d, s, count, options),
            }
        }
    }
}

/// Every rank's input and the expected output of every rank, for `count` elements per part.
pub(crate) fn case(
    rng: &mut SmallRng,
    coll: Coll,
    world: usize,
    dtype: DataType,
    op: ReduceOpKind,
    count: usize,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let size = dtype.size();
    let parts = match coll {
        Coll::Ar | Coll::Ag => 1,
        Coll::Rs | Coll::A2a => world,
    };
    let big = count * size * parts > 8 << 20;
    let inputs: Vec<Vec<u8>> = (0..world)
        .map(|_| {
            if big {
                random_elements_parallel(rng.random(), dtype, op, count * parts)
            } else {
                random_elements(rng, dtype, op, count * parts)
            }
        })
        .collect();
    let part = count * size;
    let outputs = match coll {
        Coll::Ar => {
            let srcs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
            vec![reference_f32(dtype, op, &srcs); world]
        }
        Coll::Ag => vec![inputs.concat(); world],
        Coll::Rs => (0..world)
            .map(|r| {
                let srcs: Vec<&[u8]> = inputs
                    .iter()
                    .map(|v| &v[r * part..(r + 1) * part])
                    .collect();
                reference_f32(dtype, op, &srcs)
            })
            .collect(),
        Coll::A2a => (0..world)
            .map(|r| {
                (0..world)
                    .flat_map(|p| inputs[p][r * part..(r + 1) * part].to_vec())
                    .collect()
            })
            .collect(),
    };
    (inputs, outputs)
}

/// Runs one collective on every rank and returns how many ranks' outputs differ.
#[allow(clippy::too_many_arguments)]
fn run_case(
    gpu: &Arc<Gpu>,
    world: u32,
    req: WorkspaceRequirements,
    coll: Coll,
    dtype: DataType,
    op: ReduceOpKind,
    count: usize,
    inputs: &[Vec<u8>],
    want: &[Vec<u8>],
    options: &Options,
) -> Vec<String> {
    virtual_node_failures(gpu, world, req, |ctx, stream| {
        let r = ctx.rank() as usize;
        let src = upload(stream, &inputs[r]);
        let dst = poisoned(stream, want[r].len());
        let (s, d) = (span(&src, stream), span(&dst, stream));
        // SAFETY: both buffers hold what the collective touches and outlive the synchronisation.
        let launched = unsafe { coll.raw(ctx, dtype, op, d, s, count as u64, options) };
        if let Err(e) = launched.and_then(|_| ctx.synchronize()) {
            return Some(format!("rank {r}: {e}"));
        }
        output_differs(r, &download(stream, &dst, want[r].len()), &want[r])
    })
}

#[test]
fn every_collective_matches_its_reference_on_the_virtual_node() {
    let gpu = gpu_or_return!("collectives");
    let mut rng = fresh_rng("gpu collectives");
    let mut ran = std::collections::BTreeMap::<&str, usize>::new();
    for world in WORLDS {
        let w = world as usize;
        for coll in [Coll::Ar, Coll::Ag, Coll::Rs, Coll::A2a] {
            // Elements per part: empty, one, odd, around the latency regime, around the small
            // workspace's 1 MiB staging half (cyclic staging above it), and large.
            let mut sizes: Vec<(usize, WorkspaceRequirements)> = [
                0usize,
                1,
                1001,
                16 * 1024 - 3,
                16 * 1024 + 5,
                200_000,
                300_001,
            ]
            .into_iter()
            .map(|n| (n, WorkspaceRequirements::small()))
            .collect();
            let big_bytes: usize = if world == 8 { 256 << 20 } else { 64 << 20 };
            sizes.push((
                big_bytes
                    / 2
                    / if matches!(coll, Coll::Rs | Coll::A2a) {
                        w
                    } else {
                        1
                    },
                WorkspaceRequirements::default(),
            ));
            for (i, &(count, req)) in sizes.iter().enumerate() {
                let reduces = matches!(coll, Coll::Ar | Coll::Rs);
                // Small sizes walk through every type and operator; the large one is bf16 sum.
                let (dtype, op) = if i + 1 == sizes.len() {
                    (DataType::Bf16, ReduceOpKind::Sum)
                } else if reduces {
                    (
                        DataType::ALL[i % 5],
                        [ReduceOpKind::Sum, ReduceOpKind::Max, ReduceOpKind::Min][(i / 5 + i) % 3],
                    )
                } else {
                    (DataType::ALL[i % 5], ReduceOpKind::Sum)
                };
                let (inputs, want) = case(&mut rng, coll, w, dtype, op, count);
                // One size in three stages its ordinary buffers, one takes the one pass over
                // the peers' whatever its size, and the rest (and the large size) reach the
                // peers' where that pays, as the virtual node's ranks share one process.
                let last = i + 1 == sizes.len();
                let options = Options {
                    staged: i % 3 == 1 && !last,
                    direct: i % 3 == 2 && !last,
                    ..Options::default()
                };
                let errors = run_case(
                    &gpu, world, req, coll, dtype, op, count, &inputs, &want, &options,
                );
                assert!(
                    errors.is_empty(),
                    "{coll:?} world {world} {} {} count {count} staged {} direct {}: {errors:?}",
                    dtype.name(),
                    op.name(),
                    options.staged,
                    options.direct,
                );
                *ran.entry(match coll {
                    Coll::Ar => "all_reduce",
                    Coll::Ag => "all_gather",
                    Coll::Rs => "reduce_scatter",
                    Coll::A2a => "all_to_all",
                })
                .or_default() += 1;
            }
        }
    }
    println!("collective cases run (host-launched, default mode): {ran:?}");
}

#[test]
fn deterministic_mode_is_bitwise_identical_across_plans_and_regimes() {
    let gpu = gpu_or_return!("deterministic collectives");
    let mut rng = fresh_rng("gpu deterministic");
    let mut ran = 0;
    for world in [4u32, 8] {
        for (count, algorithms) in [
            (
                8 * 1024usize,
                vec![
                    Algorithm::OneShot,
                    Algorithm::TwoShot,
                    Algorithm::Throughput,
                    Algorithm::Auto,
                ],
            ),
            (1 << 20, vec![Algorithm::Throughput, Algorithm::Auto]),
        ] {
            let (inputs, want) = case(
                &mut rng,
                Coll::Ar,
                world as usize,
                DataType::Bf16,
                ReduceOpKind::Sum,
                count,
            );
            for algorithm in algorithms {
                for (blocks, chunk) in [(2u32, 64u64 << 10), (8, 256 << 10), (16, 1 << 20)] {
                    let mut plan = purlin_tuning::Table::builtin()
                        .lookup(
                            90,
                            world,
                            purlin::collective::CollectiveKind::AllReduce,
                            2 * count as u64,
                        )
                        .plan;
                    plan.chunk_bytes = chunk;
                    let options = Options {
                        mode: ReductionMode::Deterministic,
                        algorithm: Some(algorithm),
                        choice: Some(purlin_tuning::Choice { blocks, plan }),
                        ..Options::default()
                    };
                    let errors = run_case(
                        &gpu,
                        world,
                        WorkspaceRequirements::default(),
                        Coll::Ar,
                        DataType::Bf16,
                        ReduceOpKind::Sum,
                        count,
                        &inputs,
                        &want,
                        &options,
                    );
                    assert!(
                        errors.is_empty(),
                        "world {world} count {count} {algorithm:?} blocks {blocks} chunk {chunk}: {errors:?}"
                    );
                    ran += 1;
                }
            }
        }
    }
    println!("deterministic all_reduce cases run (bitwise vs reference): {ran}");
}

/// Random V counts with zeros and heavy skew.
fn v_counts(rng: &mut SmallRng, world: usize, max: u64) -> Vec<u64> {
    (0..world)
        .map(|i| match rng.random_range(0..4) {
            0 => 0,
            1 => max,
            _ => rng.random_range(1..=max / (i as u64 + 2)).max(1),
        })
        .collect()
}

#[test]
fn v_collectives_match_references_and_replay_in_graphs_with_new_counts() {
    let gpu = gpu_or_return!("V collectives");
    let mut rng = fresh_rng("gpu v collectives");
    let dtype = DataType::F32;
    let mut ran = 0;
    // Small counts run the packet paths (lean launches), large ones the staged regime.
    for (world, max) in [
        (2u32, 1_000u64),
        (4, 1_000),
        (4, 50_000),
        (8, 1_000),
        (8, 50_000),
    ] {
        let w = world as usize;
        // Three rounds of counts (zeros, skew); each collective is captured into a graph once,
        // then the graph is replayed for every round with that round's counts and inputs.
        let rounds: Vec<(Vec<u64>, Vec<Vec<u64>>)> = (0..3)
            .map(|_| {
                (
                    v_counts(&mut rng, w, max),
                    (0..w).map(|_| v_counts(&mut rng, w, max / 4)).collect(),
                )
            })
            .collect();
        let seed: u64 = rng.random();
        let input = |rank: usize, n: usize, round: usize| -> Vec<u8> {
            let mut r = SmallRng::seed_from_u64(seed ^ ((rank as u64) << 32) ^ round as u64);
            random_elements(&mut r, dtype, ReduceOpKind::Sum, n)
        };
        assert_every_rank_passes(
            &gpu,
            world,
            WorkspaceRequirements::small(),
            |ctx, stream| {
                let r = ctx.rank() as usize;
                let capacity = 4 * max as usize * w;
                let mut src = poisoned(stream, capacity);
                let mut dst = poisoned(stream, capacity);
                let mut counts = stream.alloc_zeros::<u64>(2 * w).unwrap();
                let (s, d) = (span(&src, stream), span(&dst, stream));
                let counts_arg = Counts {
                    addr: Span::from_device(&counts, stream).addr,
                    max_count: max,
                };
                let mut failures = Vec::new();
                for (kind, name) in [
                    (0, "all_gather_v"),
                    (1, "reduce_scatter_v"),
                    (2, "all_to_all_v"),
                ] {
                    // SAFETY: the buffers hold the largest layout any round's counts describe.
                    let (graph, captured) = capture_graph(stream, || unsafe {
                        match kind {
                            0 => collective::all_gather_v_raw(
                                ctx,
                                dtype,
                                d,
                                s,
                                counts_arg,
                                &Options::default(),
                            ),
                            1 => collective::reduce_scatter_v_raw(
                                ctx,
                                dtype,
                                ReduceOpKind::Sum,
                                d,
                                s,
                                counts_arg,
                                &Options::default(),
                            ),
                            _ => collective::all_to_all_v_raw(
                                ctx,
                                dtype,
                                d,
                                s,
                                counts_arg,
                                &Options::default(),
                            ),
                        }
                    });
                    if let Err(e) = captured {
                        failures.push(format!("{name} rank {r}: capture failed: {e}"));
                        continue;
                    }
                    for (round, (gather, a2a)) in rounds.iter().enumerate() {
                        let (mine, send_n): (Vec<u64>, usize) = match kind {
                            0 => (gather.clone(), gather[r] as usize),
                            1 => (gather.clone(), gather.iter().sum::<u64>() as usize),
                            _ => (
                                [a2a[r].clone(), (0..w).map(|p| a2a[p][r]).collect()].concat(),
                                a2a[r].iter().sum::<u64>() as usize,
                            ),
                        };
                        let mut padded = mine.clone();
                        padded.resize(2 * w, 0);
                        stream.memcpy_htod(&padded, &mut counts).unwrap();
                        let src_bytes = input(r, send_n, round);
                        if !src_bytes.is_empty() {
                            stream
                                .memcpy_htod(&src_bytes, &mut src.slice_mut(..src_bytes.len()))
                                .unwrap();
                        }
                        stream
                            .memcpy_htod(&vec![POISON; capacity], &mut dst)
                            .unwrap();
                        graph.launch().unwrap();
                        if let Err(e) = ctx.synchronize() {
                            failures.push(format!("{name} round {round} rank {r}: {e}"));
                            return failures;
                        }
                        let want: Vec<u8> = match kind {
                            0 => (0..w)
                                .flat_map(|p| input(p, gather[p] as usize, round))
                                .collect(),
                            1 => {
                                let off = gather[..r].iter().sum::<u64>() as usize * 4;
                                let len = gather[r] as usize * 4;
                                let all: Vec<Vec<u8>> = (0..w)
                                    .map(|p| input(p, gather.iter().sum::<u64>() as usize, round))
                                    .collect();
                                let srcs: Vec<&[u8]> =
                                    all.iter().map(|v| &v[off..off + len]).collect();
                                reference_f32(dtype, ReduceOpKind::Sum, &srcs)
                            }
                            _ => (0..w)
                                .flat_map(|p| {
                                    let theirs =
                                        input(p, a2a[p].iter().sum::<u64>() as usize, round);
                                    let off = a2a[p][..r].iter().sum::<u64>() as usize * 4;
                                    theirs[off..off + a2a[p][r] as usize * 4].to_vec()
                                })
                                .collect(),
                        };
                        if download(stream, &dst, want.len()) != want {
                            failures.push(format!("{name} round {round} rank {r}: output differs"));
                        }
                    }
                }
                failures
            },
        );
        ran += 3 * rounds.len();
    }
    println!("V collective graph replays checked (3 kinds x 3 rounds of counts): {ran} per rank");
}

#[test]
fn graph_captured_all_reduce_replays_100_times_with_fresh_inputs() {
    let gpu = gpu_or_return!("graph replay");
    let seed: u64 = fresh_rng("gpu graph replay").random();
    let (dtype, op, count) = (DataType::Bf16, ReduceOpKind::Sum, 96 * 1024usize);
    for world in [2u32, 8] {
        let w = world as usize;
        let input = |rank: usize, it: usize| {
            let mut r = SmallRng::seed_from_u64(seed ^ ((rank as u64) << 40) ^ it as u64);
            random_elements(&mut r, dtype, op, count)
        };
        assert_every_rank_passes(
            &gpu,
            world,
            WorkspaceRequirements::default(),
            |ctx, stream| {
                let r = ctx.rank() as usize;
                let mut src = poisoned(stream, count * 2);
                let dst = poisoned(stream, count * 2);
                let (s, d) = (span(&src, stream), span(&dst, stream));
                // Capture one AllReduce into a graph.
                // SAFETY: both buffers hold `count` bf16 and outlive every replay.
                let (graph, captured) = capture_graph(stream, || unsafe {
                    collective::all_reduce_raw(
                        ctx,
                        dtype,
                        op,
                        d,
                        s,
                        count as u64,
                        &Options::default(),
                    )
                });
                if let Err(e) = captured {
                    return Some(format!("rank {r}: capture failed: {e}"));
                }
                for it in 0..100 {
                    stream.memcpy_htod(&input(r, it), &mut src).unwrap();
                    graph.launch().unwrap();
                    if let Err(e) = ctx.synchronize() {
                        return Some(format!("rank {r} replay {it}: {e}"));
                    }
                    let all: Vec<Vec<u8>> = (0..w).map(|p| input(p, it)).collect();
                    let srcs: Vec<&[u8]> = all.iter().map(|v| v.as_slice()).collect();
                    if download(stream, &dst, count * 2) != reference_f32(dtype, op, &srcs) {
                        return Some(format!("rank {r} replay {it}: output differs"));
                    }
                }
                None
            },
        );
    }
    println!("graph replays checked: 2 worlds x 100 replays");
}

#[test]
fn fused_kernel_matches_the_host_launched_all_gather() {
    let gpu = gpu_or_return!("fused all_gather");
    let module =
        purlin::module::Module::load(&gpu, purlin_examples::fused_kernel_ptx(gpu.arch())).unwrap();
    let (threads, smem) = collective::kernel_shape(gpu.arch());
    let mut rng = fresh_rng("gpu fused");
    let scale = 0.25f32;
    let mut ran = 0;
    for world in WORLDS {
        for count in [1usize, 4099, 1 << 20] {
            let inputs: Vec<Vec<f32>> = (0..world)
                .map(|_| (0..count).map(|_| rng.random_range(-8.0f32..8.0)).collect())
                .collect();
            let results = virtual_node(
                &gpu,
                world,
                WorkspaceRequirements::default(),
                |ctx, stream| {
                    let r = ctx.rank() as usize;
                    let bytes = 4 * count;
                    let input = stream.clone_htod(&inputs[r]).unwrap();
                    let send = stream.alloc_zeros::<u8>(bytes).unwrap();
                    let fused_out = poisoned(stream, bytes * world as usize);
                    let host_out = poisoned(stream, bytes * world as usize);
                    let barrier = stream.alloc_zeros::<u32>(2).unwrap();
                    // 1. The fused kernel: scale into `send`, grid barrier, AllGather.
                    let (mut shape, plan) = ctx
                        .plan(
                            collective::CollectiveKind::AllGather,
                            bytes as u64,
                            &Options::default(),
                        )
                        .unwrap();
                    (shape.threads, shape.smem_bytes) = (threads, smem);
                    let mut args = purlin::purlin_device::snac::SnacArgs::new(
                        span(&fused_out, stream).addr as *mut u8,
                        span(&send, stream).addr as *const u8,
                        bytes as u64,
                        shape.blocks,
                    );
                    args.plan = plan;
                    let ia = Span::from_device(&input, stream).addr;
                    let ba = Span::from_device(&barrier, stream).addr;
                    // SAFETY: the kernel's parameters; buffers outlive the synchronisation.
                    unsafe {
                        module
                            .launch(
                                stream,
                                "example_scale_then_all_gather",
                                shape,
                                (args, ctx.device_view(), ia, count as u64, scale, ba),
                            )
                            .unwrap()
                    };
                    ctx.synchronize().unwrap();
                    // 2. The host-launched AllGather of the same (already scaled) send buffer.
                    // SAFETY: as above.
                    unsafe {
                        collective::all_gather_raw(
                            ctx,
                            DataType::F32,
                            span(&host_out, stream),
                            span(&send, stream),
                            count as u64,
                            &Options::default(),
                        )
                        .unwrap()
                    };
                    ctx.synchronize().unwrap();
                    (
                        download(stream, &fused_out, bytes * world as usize),
                        download(stream, &host_out, bytes * world as usize),
                    )
                },
            );
            let want: Vec<u8> = inputs
                .iter()
                .flat_map(|v| v.iter().flat_map(|x| (x * scale).to_le_bytes()))
                .collect();
            for (r, (fused, host)) in results.iter().enumerate() {
                assert!(
                    *fused == want,
                    "world {world} count {count} rank {r}: fused result wrong"
                );
                assert!(
                    fused == host,
                    "world {world} count {count} rank {r}: fused and host-launched differ"
                );
            }
            ran += 1;
        }
    }
    println!("fused vs host-launched cases run: {ran}");
}

#[test]
fn a_rank_that_never_launches_is_a_timeout_naming_it() {
    let gpu = gpu_or_return!("missing rank");
    let world = 4u32;
    let absent = 3u32;
    let results = virtual_node(
        &gpu,
        world,
        WorkspaceRequirements::small(),
        |ctx, stream| {
            if ctx.rank() == absent {
                return None;
            }
            ctx.set_timeout(Duration::from_millis(300));
            let src = poisoned(stream, 4096);
            let dst = poisoned(stream, 4096);
            // SAFETY: both buffers hold 1024 f32.
            unsafe {
                collective::all_reduce_raw(
                    ctx,
                    DataType::F32,
                    ReduceOpKind::Sum,
                    span(&dst, stream),
                    span(&src, stream),
                    1024,
                    &Options::default(),
                )
            }
            .unwrap();
            Some(ctx.synchronize())
        },
    );
    for (r, result) in results.into_iter().enumerate() {
        match result {
            None => assert_eq!(r as u32, absent),
            Some(Err(purlin::Error::Timeout { peer, rank, .. })) => {
                assert_eq!(rank, r as u32);
                assert_eq!(
                    peer, absent,
                    "rank {r} timed out waiting for rank {peer}, not the absent {absent}"
                );
            }
            Some(other) => {
                panic!("rank {r}: expected a timeout naming rank {absent}, got {other:?}")
            }
        }
    }
    println!("missing-rank timeout: 3 ranks reported rank {absent}");
}
