//! The seven collectives on the CPU emulation (`purlin_device::emulation`): the same device
//! code as on a GPU, one thread per (rank, block).
//!
//! Small staging halves, latency windows and chunks make every regime show up at small sizes:
//! sizes of 0, 1 element, odd, just below and above the latency threshold and the staging half,
//! and several halves (cyclic staging). Reductions must equal the f32 rank-order reference bit
//! for bit and an f64 reference within the type's tolerance. Outputs are poisoned before every
//! run; inputs are fresh random values (seed printed; `PURLIN_TEST_SEED` replays).

use purlin_device::collective::{Algorithm, CollectiveKind};
use purlin_device::element::DataType;
use purlin_device::emulation::{Buffer, Communicator, EmulationError, Launch};
use purlin_device::op::ReduceOpKind;
use purlin_device::snac::{FaultKind, Plan};
use purlin_tests::{POISON, count_wrong_f64, fresh_rng, random_elements, reference_f32};
use rand::RngExt;
use rand::rngs::SmallRng;
use std::time::{Duration, Instant};

const WORLDS: [u32; 7] = [1, 2, 3, 4, 5, 8, 16];
/// Staging half: cyclic staging from a few KiB.
const HALF: u64 = 4096;
/// Latency window: one-shot holds 1 KiB, two-shot 512 B per shard.
const WINDOW: u64 = 2048;
/// AllReduce latency threshold of the test plan.
const THRESHOLD: u64 = 512;

fn communicator(world: u32) -> Communicator {
    communicator_with_timeout(world, Duration::from_secs(30))
}

/// The test communicator with a wait bound of its own (a missing rank must fail fast).
fn communicator_with_timeout(world: u32, timeout: Duration) -> Communicator {
    Communicator::builder(world)
        .staging_half_bytes(HALF)
        .latency_window_bytes(WINDOW)
        .timeout(timeout)
        .build()
        .unwrap()
}

fn plan() -> Plan {
    Plan {
        put_blocks: 1,
        chunk_bytes: 512,
        latency_threshold: THRESHOLD,
        two_shot_min_bytes: 256,
        two_shot_min_world: 3,
        ..Plan::DEFAULT
    }
}

/// Sizes in bytes for elements of `size` bytes: 0, 1 element, odd, around the latency
/// threshold, around the staging half, and past several halves.
fn sizes(size: u64) -> [u64; 8] {
    let below = |b: u64| (b / size - 1) * size;
    let above = |b: u64| (b / size + 1) * size;
    [
        0,
        size,
        7 * size,
        below(THRESHOLD),
        above(THRESHOLD),
        below(HALF),
        above(HALF),
        3 * HALF + 5 * size,
    ]
}

fn buffers(contents: &[Vec<u8>]) -> Vec<Buffer> {
    contents.iter().map(|c| Buffer::from_slice(c)).collect()
}

/// One output of `bytes` bytes of `POISON`, so an element the call does not write never passes.
fn poisoned_buffer(bytes: usize) -> Buffer {
    let b = Buffer::zeroed(bytes);
    b.fill(POISON);
    b
}

fn poisoned(world: u32, bytes: usize) -> Vec<Buffer> {
    (0..world).map(|_| poisoned_buffer(bytes)).collect()
}

fn random_bytes(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.random::<u8>()).collect()
}

/// Every rank's input of the copying collectives: `n` fresh random bytes per rank.
fn random_byte_inputs(rng: &mut SmallRng, world: u32, n: usize) -> Vec<Vec<u8>> {
    (0..world).map(|_| random_bytes(rng, n)).collect()
}

/// Every rank's input of the reductions: `count` fresh random elements of `dtype` per rank.
fn random_inputs(
    rng: &mut SmallRng,
    world: u32,
    dtype: DataType,
    op: ReduceOpKind,
    count: usize,
) -> Vec<Vec<u8>> {
    (0..world)
        .map(|_| random_elements(rng, dtype, op, count))
        .collect()
}

/// What rank `r` receives from an AllToAll of `n`-byte parts: part `r` of every rank's input.
fn all_to_all_expected(inputs: &[Vec<u8>], r: usize, n: usize) -> Vec<u8> {
    inputs
        .iter()
        .flat_map(|input| input[r * n..(r + 1) * n].to_vec())
        .collect()
}

/// Asserts that every rank's output holds `want(rank)`; `what(rank)` names the case.
fn assert_rank_outputs<W: AsRef<[u8]>>(
    dst: &[Buffer],
    want: impl Fn(usize) -> W,
    what: impl Fn(usize) -> String,
) {
    for (r, d) in dst.iter().enumerate() {
        assert!(d.bytes() == want(r).as_ref(), "{}", what(r));
    }
}

/// Runs a matrix test's `cases` for every world of `WORLDS`, each on its own test communicator,
/// with one seeded generator and one run counter, and prints the runs it counted and the time.
fn for_every_world(name: &str, mut cases: impl FnMut(u32, &Communicator, &mut SmallRng, &mut u32)) {
    let mut rng = fresh_rng(name);
    let mut runs = 0;
    let start = Instant::now();
    for world in WORLDS {
        let comm = communicator(world);
        cases(world, &comm, &mut rng, &mut runs);
    }
    eprintln!("{name}: {runs} runs in {:?}", start.elapsed());
}

/// Checks a reduced output against both references.
fn check_reduced(what: &str, dtype: DataType, op: ReduceOpKind, srcs: &[&[u8]], got: &[u8]) {
    let want = reference_f32(dtype, op, srcs);
    if want != got {
        let size = dtype.size();
        let first = (0..want.len() / size)
            .find(|i| want[i * size..(i + 1) * size] != got[i * size..(i + 1) * size]);
        panic!("{what}: not bit-exact with the f32 rank-order reference (first element {first:?})");
    }
    assert_eq!(
        count_wrong_f64(dtype, op, srcs, got),
        0,
        "{what}: outside the f64 tolerance"
    );
}

/// Asserts that every rank's output holds all inputs in rank order, as an AllGather leaves it.
fn assert_all_gathered(dst: &[Buffer], inputs: &[Vec<u8>], what: impl Fn(usize) -> String) {
    let want = inputs.concat();
    assert_rank_outputs(dst, |_| &want, what);
}

/// Checks every rank's output of a reduce-scatter of `n`-byte parts: rank `r` holds part `r`.
fn check_reduce_scattered(
    dst: &[Buffer],
    inputs: &[Vec<u8>],
    dtype: DataType,
    op: ReduceOpKind,
    n: usize,
    what: impl Fn(usize) -> String,
) {
    for (r, d) in dst.iter().enumerate() {
        check_reduced_range(&what(r), dtype, op, inputs, r * n..(r + 1) * n, &d.bytes());
    }
}

/// Checks one rank's share of a reduce-scatter: `got` against bytes `range` of every input.
fn check_reduced_range(
    what: &str,
    dtype: DataType,
    op: ReduceOpKind,
    inputs: &[Vec<u8>],
    range: std::ops::Range<usize>,
    got: &[u8],
) {
    let parts: Vec<&[u8]> = inputs.iter().map(|v| &v[range.clone()]).collect();
    check_reduced(what, dtype, op, &parts, got);
}

/// Runs an AllReduce and checks every rank.
fn all_reduce_case(comm: &Communicator, rng: &mut SmallRng, launch: Launch) {
    let world = comm.world();
    let inputs = random_inputs(
        rng,
        world,
        launch.dtype,
        launch.op,
        launch.bytes as usize / launch.dtype.size(),
    );
    let (src, dst) = (buffers(&inputs), poisoned(world, launch.bytes as usize));
    comm.run(&launch, &src, &dst, None)
        .unwrap_or_else(|e| panic!("{launch:?}: {e}"));
    let srcs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
    for (r, d) in dst.iter().enumerate() {
        check_reduced(
            &format!("all_reduce world {world} rank {r} {launch:?}"),
            launch.dtype,
            launch.op,
            &srcs,
            &d.bytes(),
        );
    }
}

#[test]
fn all_reduce_matrix() {
    for_every_world("all_reduce_matrix", |_, comm, rng, runs| {
        for dtype in DataType::ALL {
            for op in ReduceOpKind::ALL {
                for (i, bytes) in sizes(dtype.size() as u64).into_iter().enumerate() {
                    // The static operator (a fused kernel's form) and the run-time one (the
                    // host-launched kernels', from their latency-only build when lean).
                    for runtime_op in [false, true] {
                        let mut launch =
                            Launch::new(CollectiveKind::AllReduce, bytes).typed(dtype, op);
                        launch.plan = plan();
                        launch.blocks = 1 + (i as u32 % 3);
                        launch.runtime_op = runtime_op;
                        all_reduce_case(comm, rng, launch);
                        *runs += 1;
                    }
                }
            }
        }
    });
}

/// Every algorithm (one-shot, two-shot, both throughput paths), block count and chunk size
/// gives the same bits, on one input.
#[test]
fn all_reduce_is_deterministic_across_plans() {
    let mut rng = fresh_rng("all_reduce_is_deterministic_across_plans");
    for world in [2, 3, 4, 8] {
        let comm = communicator(world);
        for dtype in DataType::ALL {
            let bytes = (600 / dtype.size() as u64) * dtype.size() as u64;
            let inputs = random_inputs(
                &mut rng,
                world,
                dtype,
                ReduceOpKind::Sum,
                bytes as usize / dtype.size(),
            );
            let src = buffers(&inputs);
            let mut results: Vec<Vec<u8>> = Vec::new();
            for (algorithm, blocks, chunk) in [
                (Algorithm::OneShot, 1, 512),
                (Algorithm::OneShot, 4, 512),
                (Algorithm::TwoShot, 2, 512),
                (Algorithm::TwoShot, 3, 512),
                (Algorithm::Throughput, 2, 16),
                (Algorithm::Throughput, 3, 64),
                (Algorithm::Throughput, 5, 4096),
                (Algorithm::Throughput, 1, 128),
            ] {
                let mut launch =
                    Launch::new(CollectiveKind::AllReduce, bytes).typed(dtype, ReduceOpKind::Sum);
                launch.plan = Plan {
                    algorithm: algorithm as u32,
                    chunk_bytes: chunk,
                    ..plan()
                };
                launch.blocks = blocks;
                let dst = poisoned(world, bytes as usize);
                comm.run(&launch, &src, &dst, None).unwrap();
                for d in &dst {
                    results.push(d.bytes().to_vec());
                }
            }
            assert!(
                results.windows(2).all(|w| w[0] == w[1]),
                "world {world} {dtype:?}: results differ across plans"
            );
            let srcs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
            assert_eq!(results[0], reference_f32(dtype, ReduceOpKind::Sum, &srcs));
        }
    }
}

#[test]
fn reduce_scatter_matrix() {
    for_every_world("reduce_scatter_matrix", |world, comm, rng, runs| {
        for dtype in DataType::ALL {
            for op in ReduceOpKind::ALL {
                // Per-rank output sizes; the input is `world` times larger.
                let cases = sizes(dtype.size() as u64).into_iter().take(7).enumerate();
                // Static and run-time operators, as `all_reduce_matrix`.
                for ((i, bytes), runtime_op) in cases.flat_map(|c| [(c, false), (c, true)]) {
                    let mut launch =
                        Launch::new(CollectiveKind::ReduceScatter, bytes).typed(dtype, op);
                    launch.plan = plan();
                    launch.blocks = 1 + (i as u32 % 3);
                    launch.runtime_op = runtime_op;
                    let n = bytes as usize;
                    let inputs =
                        random_inputs(rng, world, dtype, op, world as usize * n / dtype.size());
                    let (src, dst) = (buffers(&inputs), poisoned(world, n));
                    comm.run(&launch, &src, &dst, None)
                        .unwrap_or_else(|e| panic!("{launch:?}: {e}"));
                    check_reduce_scattered(&dst, &inputs, dtype, op, n, |r| {
                        format!("reduce_scatter world {world} rank {r} {launch:?}")
                    });
                    *runs += 1;
                }
            }
        }
    });
}

#[test]
fn all_gather_matrix() {
    for_every_world("all_gather_matrix", |world, comm, rng, runs| {
        for size in [1u64, 2, 4] {
            for (i, bytes) in sizes(size).into_iter().enumerate() {
                let n = bytes as usize;
                let mut launch = Launch::new(CollectiveKind::AllGather, bytes);
                launch.plan = plan();
                launch.blocks = 1 + (i as u32 % 4);
                let inputs = random_byte_inputs(rng, world, n);
                let (src, dst) = (buffers(&inputs), poisoned(world, world as usize * n));
                comm.run(&launch, &src, &dst, None)
                    .unwrap_or_else(|e| panic!("{launch:?}: {e}"));
                assert_all_gathered(&dst, &inputs, |r| {
                    format!("all_gather world {world} rank {r} {launch:?}")
                });
                *runs += 1;
            }
        }
    });
}

#[test]
fn all_gather_in_place() {
    let mut rng = fresh_rng("all_gather_in_place");
    for world in [2, 3, 5] {
        let comm = communicator(world);
        for bytes in [12u64, 1000, 5000] {
            let n = bytes as usize;
            let inputs = random_byte_inputs(&mut rng, world, n);
            let dst = poisoned(world, world as usize * n);
            for (r, d) in dst.iter().enumerate() {
                let mut all = d.bytes().to_vec();
                all[r * n..(r + 1) * n].copy_from_slice(&inputs[r]);
                d.write(&all);
            }
            let mut launch = Launch::new(CollectiveKind::AllGather, bytes);
            launch.plan = plan();
            comm.launch(launch.blocks, None, |rank, block, ctx, smem| {
                let d = &dst[rank as usize];
                // SAFETY: src is part `rank` of dst, as in-place AllGather allows.
                let src = unsafe { d.as_ptr().add(rank as usize * n) };
                let mut args =
                    purlin_device::snac::SnacArgs::new(d.as_mut_ptr(), src, bytes, launch.blocks);
                (args.block, args.smem, args.plan) = (block, smem, launch.plan);
                // SAFETY: live buffers of the sizes AllGather needs.
                unsafe {
                    purlin_device::collective::all_gather::<
                        purlin_device::atom::Host,
                        purlin_device::snac::Runtime,
                    >(&args, &ctx)
                };
            })
            .unwrap();
            assert_all_gathered(&dst, &inputs, |_| {
                format!("in-place all_gather world {world} bytes {bytes}")
            });
        }
    }
}

#[test]
fn all_to_all_matrix() {
    for_every_world("all_to_all_matrix", |world, comm, rng, runs| {
        for size in [1u64, 4] {
            for (i, bytes) in sizes(size).into_iter().take(7).enumerate() {
                let n = bytes as usize;
                let w = world as usize;
                let mut launch = Launch::new(CollectiveKind::AllToAll, bytes);
                launch.plan = plan();
                launch.blocks = 1 + (i as u32 % 4);
                let inputs = random_byte_inputs(rng, world, w * n);
                let (src, dst) = (buffers(&inputs), poisoned(world, w * n));
                comm.run(&launch, &src, &dst, None)
                    .unwrap_or_else(|e| panic!("{launch:?}: {e}"));
                assert_rank_outputs(
                    &dst,
                    |r| all_to_all_expected(&inputs, r, n),
                    |r| format!("all_to_all world {world} rank {r} {launch:?}"),
                );
                *runs += 1;
            }
        }
    });
}

/// Random counts with zeros and heavy skew: mostly small, some zero, one rank (sometimes) far
/// larger than the rest, sometimes all zero.
fn skewed_counts(rng: &mut SmallRng, n: usize, big: u64) -> Vec<u64> {
    let mut counts: Vec<u64> = (0..n)
        .map(|_| match rng.random_range(0..4) {
            0 => 0,
            1 => rng.random_range(1..4),
            _ => rng.random_range(0..big / 8 + 1),
        })
        .collect();
    match rng.random_range(0..6) {
        0 => counts.iter_mut().for_each(|c| *c = 0),
        1 | 2 => {
            let at = rng.random_range(0..n);
            counts[at] = big + rng.random_range(0..big);
        }
        _ => {}
    }
    counts
}

/// `big` for [`skewed_counts`] such that every count it draws keeps a V call with the tightest
/// `max_count` in the latency regime ([`THRESHOLD`] over the world).
fn lean_count(world: u32, elem: u32) -> u64 {
    (THRESHOLD / 2 / world as u64 / elem as u64).max(1)
}

fn counts_buffers(world: u32, counts: &[u64]) -> Vec<Buffer> {
    (0..world).map(|_| Buffer::from_slice(counts)).collect()
}

#[test]
fn all_gather_v_matrix() {
    for_every_world("all_gather_v_matrix", |world, comm, rng, runs| {
        for case in 0..16u32 {
            let elem = [1u32, 2, 4][case as usize % 3];
            // Odd cases: counts small enough for the packet path, and the tightest bound.
            let lean = case % 2 == 1;
            let big = if lean {
                lean_count(world, elem)
            } else {
                3 * HALF / elem as u64
            };
            let counts = skewed_counts(rng, world as usize, big);
            let inputs: Vec<Vec<u8>> = counts
                .iter()
                .map(|&c| random_bytes(rng, (c * elem as u64) as usize))
                .collect();
            let total: usize = inputs.iter().map(Vec::len).sum();
            let mut launch = Launch::new(CollectiveKind::AllGatherV, 0);
            (launch.plan, launch.elem_bytes, launch.blocks) = (plan(), elem, 1 + case % 4);
            if lean {
                launch.max_count = counts.iter().copied().max().unwrap_or(0).max(1);
            }
            let (src, dst) = (buffers(&inputs), poisoned(world, total));
            comm.run(&launch, &src, &dst, Some(&counts_buffers(world, &counts)))
                .unwrap_or_else(|e| panic!("{counts:?}: {e}"));
            assert_all_gathered(&dst, &inputs, |r| {
                format!("all_gather_v world {world} rank {r} counts {counts:?}")
            });
            *runs += 1;
        }
    });
}

#[test]
fn reduce_scatter_v_matrix() {
    for_every_world("reduce_scatter_v_matrix", |world, comm, rng, runs| {
        for dtype in DataType::ALL {
            for op in ReduceOpKind::ALL {
                let size = dtype.size();
                // Every fourth run: counts small enough for the packet path (with the tight
                // bound below).
                let big = if *runs % 4 == 3 {
                    lean_count(world, size as u32)
                } else {
                    2 * HALF / size as u64
                };
                let counts = skewed_counts(rng, world as usize, big);
                let total: u64 = counts.iter().sum();
                let offsets: Vec<usize> = counts
                    .iter()
                    .scan(0usize, |at, &c| {
                        Some(std::mem::replace(at, *at + c as usize * size))
                    })
                    .collect();
                let inputs = random_inputs(rng, world, dtype, op, total as usize);
                let mut launch = Launch::new(CollectiveKind::ReduceScatterV, 0).typed(dtype, op);
                (launch.plan, launch.blocks) = (plan(), 1 + *runs % 4);
                // In turn: the static operator with no bound on the counts (never lean), and
                // the run-time one with the tightest bound (lean when small enough, from the
                // latency-only build, as the host launches it; see `all_reduce_matrix`).
                if *runs % 2 == 1 {
                    launch.runtime_op = true;
                    launch.max_count = counts.iter().copied().max().unwrap_or(0).max(1);
                }
                let src = buffers(&inputs);
                let dst: Vec<Buffer> = counts
                    .iter()
                    .map(|&c| poisoned_buffer(c as usize * size))
                    .collect();
                comm.run(&launch, &src, &dst, Some(&counts_buffers(world, &counts)))
                    .unwrap_or_else(|e| panic!("{counts:?} {launch:?}: {e}"));
                for (r, d) in dst.iter().enumerate() {
                    let (at, n) = (offsets[r], counts[r] as usize * size);
                    if n > 0 {
                        check_reduced_range(
                            &format!("reduce_scatter_v world {world} rank {r} {counts:?}"),
                            dtype,
                            op,
                            &inputs,
                            at..at + n,
                            &d.bytes(),
                        );
                    }
                }
                *runs += 1;
            }
        }
    });
}

/// A random AllToAllV exchange: `m[p][q]` elements go from `p` to `q`; `tight`: the largest
/// count as `max_count` (else no bound).
fn a2av_case(
    comm: &Communicator,
    rng: &mut SmallRng,
    (elem, blocks, tight): (u32, u32, bool),
    m: &[Vec<u64>],
) {
    let world = comm.world();
    let w = world as usize;
    let e = elem as usize;
    let inputs: Vec<Vec<u8>> = (0..w)
        .map(|p| random_bytes(rng, m[p].iter().sum::<u64>() as usize * e))
        .collect();
    let send_at = |p: usize, q: usize| m[p][..q].iter().sum::<u64>() as usize * e;
    let recv_total = |q: usize| (0..w).map(|p| m[p][q]).sum::<u64>() as usize * e;
    let counts: Vec<Buffer> = (0..w)
        .map(|r| {
            let mut c: Vec<u64> = m[r].clone();
            c.extend((0..w).map(|p| m[p][r]));
            Buffer::from_slice(&c)
        })
        .collect();
    let src = buffers(&inputs);
    let dst: Vec<Buffer> = (0..w).map(|q| poisoned_buffer(recv_total(q))).collect();
    let mut launch = Launch::new(CollectiveKind::AllToAllV, 0);
    (launch.plan, launch.elem_bytes, launch.blocks) = (plan(), elem, blocks);
    if tight {
        launch.max_count = m.iter().flatten().copied().max().unwrap_or(0).max(1);
    }
    comm.run(&launch, &src, &dst, Some(&counts))
        .unwrap_or_else(|err| panic!("{m:?}: {err}"));
    for (q, d) in dst.iter().enumerate() {
        let want: Vec<u8> = (0..w)
            .flat_map(|p| inputs[p][send_at(p, q)..send_at(p, q) + m[p][q] as usize * e].to_vec())
            .collect();
        assert!(
            d.bytes() == want.as_slice(),
            "all_to_all_v world {world} rank {q} matrix {m:?}"
        );
    }
}

#[test]
fn all_to_all_v_matrix() {
    for_every_world("all_to_all_v_matrix", |world, comm, rng, runs| {
        for case in 0..14u32 {
            let elem = [1u32, 4][case as usize % 2];
            // Every other pair of cases: counts small enough for the packet path, and the
            // tightest bound.
            let lean = case % 4 >= 2;
            let big = if lean {
                lean_count(world, elem)
            } else {
                2 * HALF / world as u64 / elem as u64
            };
            let m: Vec<Vec<u64>> = (0..world)
                .map(|_| skewed_counts(rng, world as usize, big))
                .collect();
            a2av_case(comm, rng, (elem, 1 + case % 4, lean), &m);
            *runs += 1;
        }
    });
}

/// 1000 calls on one communicator, collectives and sizes changing every call: epochs, parity,
/// cyclic slots and latency windows carry over from call to call.
#[test]
fn thousand_back_to_back_calls() {
    let mut rng = fresh_rng("thousand_back_to_back_calls");
    let world = 4;
    let comm = communicator(world);
    let w = world as usize;
    for call in 0..1000 {
        let kind = CollectiveKind::ALL[rng.random_range(0..7)];
        let dtype = DataType::ALL[rng.random_range(0..5)];
        let op = ReduceOpKind::ALL[rng.random_range(0..4)];
        let size = dtype.size() as u64;
        let elems = match rng.random_range(0..4) {
            0 => rng.random_range(0..8),
            1 => rng.random_range(0..THRESHOLD / size + 8),
            _ => rng.random_range(0..3 * HALF / size),
        };
        let bytes = elems * size;
        let blocks = rng.random_range(1..5);
        let mut launch = Launch::new(kind, bytes).typed(dtype, op);
        (launch.plan, launch.blocks, launch.elem_bytes) = (plan(), blocks, size as u32);
        if rng.random_range(0..4) == 0 {
            launch.plan.chunk_bytes = 16 * rng.random_range(1..64);
        }
        match kind {
            CollectiveKind::AllReduce => all_reduce_case(&comm, &mut rng, launch),
            CollectiveKind::AllGather | CollectiveKind::AllToAll => {
                let (n, parts_in) = (
                    bytes as usize,
                    if kind == CollectiveKind::AllToAll {
                        w
                    } else {
                        1
                    },
                );
                let inputs = random_byte_inputs(&mut rng, world, parts_in * n);
                let (src, dst) = (buffers(&inputs), poisoned(world, w * n));
                comm.run(&launch, &src, &dst, None)
                    .unwrap_or_else(|e| panic!("call {call} {launch:?}: {e}"));
                assert_rank_outputs(
                    &dst,
                    |r| {
                        if kind == CollectiveKind::AllGather {
                            inputs.concat()
                        } else {
                            all_to_all_expected(&inputs, r, n)
                        }
                    },
                    |r| format!("call {call}: {launch:?} rank {r}"),
                );
            }
            CollectiveKind::ReduceScatter => {
                let n = bytes as usize;
                let inputs = random_inputs(&mut rng, world, dtype, op, w * n / size as usize);
                let (src, dst) = (buffers(&inputs), poisoned(world, n));
                comm.run(&launch, &src, &dst, None)
                    .unwrap_or_else(|e| panic!("call {call} {launch:?}: {e}"));
                check_reduce_scattered(&dst, &inputs, dtype, op, n, |r| {
                    format!("call {call} rank {r} {launch:?}")
                });
            }
            CollectiveKind::AllGatherV => {
                let counts = skewed_counts(&mut rng, w, HALF);
                let inputs: Vec<Vec<u8>> = counts
                    .iter()
                    .map(|&c| random_bytes(&mut rng, (c * size) as usize))
                    .collect();
                let total: usize = inputs.iter().map(Vec::len).sum();
                let (src, dst) = (buffers(&inputs), poisoned(world, total));
                comm.run(&launch, &src, &dst, Some(&counts_buffers(world, &counts)))
                    .unwrap_or_else(|e| panic!("call {call}: {e}"));
                let want = inputs.concat();
                assert!(
                    dst.iter().all(|d| d.bytes() == want.as_slice()),
                    "call {call}: all_gather_v {counts:?}"
                );
            }
            CollectiveKind::ReduceScatterV => {
                let counts = skewed_counts(&mut rng, w, HALF / size);
                let s = size as usize;
                let total: u64 = counts.iter().sum();
                let inputs = random_inputs(&mut rng, world, dtype, op, total as usize);
                let src = buffers(&inputs);
                let dst: Vec<Buffer> = counts
                    .iter()
                    .map(|&c| Buffer::zeroed(c as usize * s))
                    .collect();
                comm.run(&launch, &src, &dst, Some(&counts_buffers(world, &counts)))
                    .unwrap_or_else(|e| panic!("call {call}: {e}"));
                let mut at = 0;
                for (r, d) in dst.iter().enumerate() {
                    let n = counts[r] as usize * s;
                    if n > 0 {
                        check_reduced_range(
                            &format!("call {call} rank {r} rsv {counts:?}"),
                            dtype,
                            op,
                            &inputs,
                            at..at + n,
                            &d.bytes(),
                        );
                    }
                    at += n;
                }
            }
            CollectiveKind::AllToAllV => {
                // Every third call small enough for the packet path, with the tight bound.
                let lean = call % 3 == 0;
                let big = if lean { lean_count(world, 1) } else { HALF / 2 };
                let m: Vec<Vec<u64>> = (0..w).map(|_| skewed_counts(&mut rng, w, big)).collect();
                a2av_case(&comm, &mut rng, (1, blocks, lean), &m);
            }
        }
    }
}

/// A rank that never joins: every other rank times out and names it; nothing hangs.
/// (Before the rule in `Call::spin`, ranks that saw the first rank's abort record reported
/// `PeerFaulted` instead.)
#[test]
fn a_rank_that_never_joins_is_named() {
    let world = 4;
    let absent = 2;
    for kind in CollectiveKind::ALL {
        // 64 threads: block 0's last warp checks the digests between sending and receiving on
        // the packet paths (the order of the waits that decides which rank gives up first).
        for (bytes, threads) in [(64u64, 1u32), (64, 64), (3 * HALF, 1)] {
            let comm = communicator_with_timeout(world, Duration::from_millis(200));
            let w = world as usize;
            let n = bytes as usize;
            let src: Vec<Buffer> = (0..w).map(|_| Buffer::zeroed(w * n)).collect();
            let dst: Vec<Buffer> = (0..w).map(|_| Buffer::zeroed(w * n)).collect();
            let counts: Vec<Buffer> = (0..w)
                .map(|_| Buffer::from_slice(&vec![bytes / 4; 2 * w]))
                .collect();
            let mut launch = Launch::new(kind, bytes);
            (launch.plan, launch.absent, launch.blocks) = (plan(), Some(absent), 3);
            launch.threads = threads;
            let started = Instant::now();
            let err = comm
                .run(&launch, &src, &dst, Some(&counts))
                .expect_err("a missing rank must fail the call");
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{kind:?}: took {:?}",
                started.elapsed()
            );
            let EmulationError::Faults(faults) = &err else {
                panic!("{kind:?}: unexpected {err}")
            };
            assert_eq!(
                faults.len(),
                w - 1,
                "{kind:?} {bytes}: every present rank faults: {err}"
            );
            // Every present rank names the absent rank as its own timeout, whichever gave up
            // first: a rank told of a peer's timeout on a rank it never saw arrive either
            // reports that rank, not the peer.
            for f in faults {
                assert_eq!(f.collective, kind);
                assert_eq!(f.kind, FaultKind::Timeout, "{kind:?} {bytes}: {err}");
                assert_eq!(
                    (f.peer, f.peer_missing),
                    (absent, true),
                    "{kind:?} {bytes}: {f}"
                );
                assert!(
                    f.to_string()
                        .contains(&format!("rank {absent} never launched")),
                    "{f}"
                );
            }
        }
    }
}

/// Bad arguments are a fault, not a hang or a crash.
#[test]
fn invalid_arguments_fault() {
    let comm = communicator(2);
    let src = poisoned(2, 64);
    let dst = poisoned(2, 64);
    // 6 bytes is not a whole number of f32.
    let launch = Launch::new(CollectiveKind::AllReduce, 6).typed(DataType::F32, ReduceOpKind::Sum);
    let err = comm
        .run(&launch, &src, &dst, None)
        .expect_err("6 bytes of f32");
    let EmulationError::Faults(faults) = err else {
        panic!("{err}")
    };
    assert!(
        faults
            .iter()
            .all(|f| f.kind == purlin_device::snac::FaultKind::InvalidArgument)
    );
}

/// A "fused kernel" (its own work, then the collective in the same launch, with a plan fixed
/// at compile time) gives the same bits as the host-launched path on the same data.
#[test]
fn fused_and_host_launched_agree() {
    use purlin_device::atom::Host;
    use purlin_device::half::bf16;
    use purlin_device::op::Sum;
    use purlin_device::snac::{Config, SnacArgs};
    struct Fixed;
    impl Config for Fixed {
        fn plan(_: &Plan) -> Plan {
            Plan {
                chunk_bytes: 256,
                algorithm: Algorithm::Throughput as u32,
                ..Plan::DEFAULT
            }
        }
    }
    let mut rng = fresh_rng("fused_and_host_launched_agree");
    let world = 4;
    let count = 3000;
    let comm = communicator(world);
    let inputs: Vec<Vec<bf16>> = (0..world)
        .map(|_| {
            (0..count)
                .map(|_| bf16::from_f32(rng.random_range(-2.0f32..2.0)))
                .collect()
        })
        .collect();
    // Fused: every block scales its share of the input by 0.5 in place, then all blocks reduce.
    let fused_io: Vec<Buffer> = inputs.iter().map(|v| Buffer::from_slice(v)).collect();
    let blocks = 3;
    comm.launch(blocks, None, |rank, block, ctx, smem| {
        let io = &fused_io[rank as usize];
        let data = io.as_mut_ptr() as *mut bf16;
        let (first, n) =
            purlin_device::partition::even_split(count, blocks as usize, block as usize);
        for i in first..first + n {
            // SAFETY: this block's own share of the buffer.
            unsafe {
                data.add(i)
                    .write(bf16::from_f32(data.add(i).read().to_f32() * 0.5))
            };
        }
        // A grid-wide barrier, as a cooperative kernel would have, before the in-place reduce
        // reads every share.
        barrier(world * blocks);
        let mut args = SnacArgs::new(io.as_mut_ptr(), io.as_ptr(), (count * 2) as u64, blocks);
        (args.block, args.smem) = (block, smem);
        // SAFETY: in-place AllReduce of `count` bf16.
        unsafe { purlin_device::collective::all_reduce::<Host, Fixed, bf16, Sum>(&args, &ctx) };
    })
    .unwrap();
    // Host-launched: pre-scaled inputs, a different plan (latency regime where it fits).
    let scaled: Vec<Vec<bf16>> = inputs
        .iter()
        .map(|v| v.iter().map(|x| bf16::from_f32(x.to_f32() * 0.5)).collect())
        .collect();
    let src: Vec<Buffer> = scaled.iter().map(|v| Buffer::from_slice(v)).collect();
    let dst = poisoned(world, count * 2);
    let mut launch = Launch::new(CollectiveKind::AllReduce, (count * 2) as u64)
        .typed(DataType::Bf16, ReduceOpKind::Sum);
    (launch.plan, launch.blocks) = (
        Plan {
            chunk_bytes: 1024,
            ..plan()
        },
        2,
    );
    comm.run(&launch, &src, &dst, None).unwrap();
    for r in 0..world as usize {
        assert_eq!(fused_io[r].bytes(), dst[r].bytes(), "rank {r}");
    }
}

/// A reusable barrier for `n` threads (the emulated grid's blocks).
fn barrier(n: u32) {
    use std::sync::{Barrier, OnceLock};
    static BARRIER: OnceLock<Barrier> = OnceLock::new();
    BARRIER.get_or_init(|| Barrier::new(n as usize)).wait();
}

/// A traced call (`Plan::trace`) leaves every rank's phase times in its local state, in the
/// order the call passes them, with `Sent` and `Received` only where the call sends packets
/// and `Loaded` and `Counted` only where it reads V counts; an untraced call leaves the trace as
/// it was.
#[test]
fn traced_calls_record_their_phases_in_order() {
    use purlin_device::context::LocalState;
    use purlin_device::snac::trace::{POINTS, Point};
    let read = |comm: &Communicator, rank: u32| -> [u64; POINTS] {
        let at = comm.context(rank).state + LocalState::TRACE as u64;
        // SAFETY: the trace words of this rank's host-memory state; no call is running.
        std::array::from_fn(|p| unsafe { ((at as *const u64).add(p)).read_volatile() })
    };
    let mut rng = fresh_rng("traced calls");
    for world in [2u32, 3, 4] {
        let comm = Communicator::builder(world).build().unwrap();
        // AllReduce of 256 B is one-shot packets; 96 KiB over 1 KiB chunks the throughput regime;
        // AllGatherV (bytes per rank) reads its counts first.
        for (kind, bytes, packets) in [
            (CollectiveKind::AllReduce, 256u64, true),
            (CollectiveKind::AllReduce, 96 << 10, false),
            (
                CollectiveKind::AllGather,
                4 * rng.random_range(1..64u64),
                true,
            ),
            (
                CollectiveKind::AllGatherV,
                rng.random_range(1..256u64),
                true,
            ),
        ] {
            let gathers = matches!(kind, CollectiveKind::AllGather | CollectiveKind::AllGatherV);
            let out = if gathers { bytes * world as u64 } else { bytes };
            let src: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(bytes as usize)).collect();
            let dst: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(out as usize)).collect();
            let v = kind.is_v();
            let mut launch = Launch::new(kind, if v { 0 } else { bytes });
            if v {
                (launch.elem_bytes, launch.max_count) = (1, bytes);
            }
            let counts = v.then(|| counts_buffers(world, &vec![bytes; world as usize]));
            launch.plan = Plan {
                trace: 1,
                chunk_bytes: 1024,
                latency_threshold: 1024,
                ..Plan::DEFAULT
            };
            comm.run(&launch, &src, &dst, counts.as_deref()).unwrap();
            for rank in 0..world {
                let t = read(&comm, rank);
                let passed: Vec<u64> = Point::ALL
                    .iter()
                    .filter(|&&p| packets || !matches!(p, Point::Sent | Point::Received))
                    .filter(|&&p| v || !matches!(p, Point::Loaded | Point::Counted))
                    .map(|&p| t[p as usize])
                    .collect();
                assert!(
                    passed.iter().all(|&x| x != 0),
                    "{kind:?} {bytes} B w{world} r{rank}: {t:?}"
                );
                assert!(
                    passed.windows(2).all(|w| w[0] <= w[1]),
                    "out of order: {t:?}"
                );
                // Only the V forms read counts.
                for p in [Point::Loaded, Point::Counted] {
                    assert_eq!(t[p as usize] != 0, v, "{kind:?} {bytes} B {p:?}: {t:?}");
                }
                for p in [Point::Sent, Point::Received] {
                    assert_eq!(
                        t[p as usize] != 0,
                        packets,
                        "{kind:?} {bytes} B {p:?}: {t:?}"
                    );
                }
            }
            let before: Vec<_> = (0..world).map(|r| read(&comm, r)).collect();
            launch.plan.trace = 0;
            comm.run(&launch, &src, &dst, counts.as_deref()).unwrap();
            let after: Vec<_> = (0..world).map(|r| read(&comm, r)).collect();
            assert_eq!(before, after, "an untraced call wrote the trace");
        }
    }
}
