//! Symmetric buffers on the virtual node (worlds 2, 4, 8): every fixed-size collective, and
//! AllGatherV / ReduceScatterV, over `SymmetricBuffer`s (the one-pass regime above the packet
//! paths) against the host reference,
//! through the typed API and the raw one, in place, over slices at the same offset on every
//! rank, queued back to back with sizes changing and one synchronise at the end (mixed with
//! calls on ordinary buffers); then what must fail: ranks that pass different buffers, and
//! buffers of different sizes.

use crate::collectives::{Coll, case};
use crate::support::{output_differs, virtual_node, virtual_node_failures};
use cudarc::driver::CudaStream;
use half::bf16;
use purlin::collective::{self, Counts, Options};
use purlin::memory::Span;
use purlin::workspace::WorkspaceRequirements;
use purlin::{Context, DataType, Error, Gpu, ReduceOpKind, SymmetricBuffer};
use purlin_tests::{POISON, fresh_rng, gpu_or_skip, random_elements, reference_f32};
use rand::RngExt;
use rand::rngs::SmallRng;
use std::sync::Arc;
use std::time::Duration;

const WORLDS: [u32; 3] = [2, 4, 8];

/// A symmetric buffer of `bytes` (at least 16) holding `data` then `POISON`.
fn filled(
    ctx: &Context,
    stream: &Arc<CudaStream>,
    bytes: usize,
    data: &[u8],
) -> SymmetricBuffer<u8> {
    let mut b = SymmetricBuffer::<u8>::new(ctx, bytes.max(16)).unwrap();
    let mut host = vec![POISON; bytes.max(16)];
    host[..data.len()].copy_from_slice(data);
    stream.memcpy_htod(&host, &mut b).unwrap();
    b
}

/// Runs `body` on every rank of a virtual node of `world` ranks with the small workspace (as
/// every test here does) and fails the test with `what` and every rank's messages, if any.
fn assert_every_rank_passes<F: IntoIterator<Item = String> + Send>(
    what: &str,
    gpu: &Arc<Gpu>,
    world: u32,
    body: impl Fn(&mut Context, &Arc<CudaStream>) -> F + Sync,
) {
    let errors = virtual_node_failures(gpu, world, WorkspaceRequirements::small(), body);
    assert!(errors.is_empty(), "{what}: {errors:?}");
}

/// Runs `body(gpu, rng, world, ran)` for every world of [`WORLDS`] with one random generator
/// (or returns once it has said there is no GPU), then prints `ran`, the cases the bodies
/// counted.
fn for_every_world(name: &str, mut body: impl FnMut(&Arc<Gpu>, &mut SmallRng, u32, &mut usize)) {
    let Some(gpu) = gpu_or_skip(name, None) else {
        return;
    };
    let mut rng = fresh_rng(&format!("gpu {name}"));
    let mut ran = 0;
    for world in WORLDS {
        body(&gpu, &mut rng, world, &mut ran);
    }
    println!("{name} cases run: {ran}");
}

#[test]
fn every_fixed_collective_over_symmetric_buffers_matches_its_reference() {
    for_every_world("symmetric collectives", |gpu, rng, world, ran| {
        let w = world as usize;
        for coll in [Coll::Ar, Coll::Ag, Coll::Rs, Coll::A2a] {
            let parts = if matches!(coll, Coll::Rs | Coll::A2a) {
                w
            } else {
                1
            };
            // Elements per part: empty, one, odd (packet paths), past the packet paths, and
            // large (64 MiB per rank).
            let counts = [0usize, 1, 1001, 300_001, (32 << 20) / parts];
            for (i, &count) in counts.iter().enumerate() {
                let (dtype, op) = if i + 1 == counts.len() {
                    (DataType::Bf16, ReduceOpKind::Sum)
                } else {
                    (
                        DataType::ALL[(i + *ran) % DataType::ALL.len()],
                        ReduceOpKind::ALL[(i + *ran) % 3],
                    )
                };
                let (inputs, want) = case(rng, coll, w, dtype, op, count);
                let what = format!("{coll:?} world {world} {dtype:?} {op:?} count {count}");
                assert_every_rank_passes(&what, gpu, world, |ctx, stream| {
                    let r = ctx.rank() as usize;
                    let src = filled(ctx, stream, inputs[r].len(), &inputs[r]);
                    let dst = filled(ctx, stream, want[r].len(), &[]);
                    let (d, s, o) = (dst.local(), src.local(), Options::default());
                    // SAFETY: both buffers hold what the call moves and are freed after the
                    // synchronisation below.
                    let launched = unsafe { coll.raw(ctx, dtype, op, d, s, count as u64, &o) };
                    let outcome = launched.and_then(|_| ctx.synchronize());
                    let got = stream.clone_dtoh(&dst).unwrap();
                    src.free().unwrap();
                    dst.free().unwrap();
                    match outcome {
                        Err(e) => Some(format!("rank {r}: {e}")),
                        Ok(()) => output_differs(r, &got[..want[r].len()], &want[r]),
                    }
                });
                *ran += 1;
            }
        }
    });
}

/// AllGatherV (symmetric outputs: push; ordinary outputs: pull) and ReduceScatterV (f32 and
/// bf16 sums, max) over symmetric buffers, counts with zeros and skew up to 8 MiB a part.
#[test]
fn v_collectives_over_symmetric_buffers_match_their_references() {
    for_every_world("symmetric V collectives", |gpu, rng, world, ran| {
        let w = world as usize;
        for round in 0..4 {
            let (dtype, op) = [
                (DataType::F32, ReduceOpKind::Sum),
                (DataType::Bf16, ReduceOpKind::Sum),
                (DataType::F16, ReduceOpKind::Max),
                (DataType::E4m3, ReduceOpKind::Min),
            ][round];
            let size = dtype.size();
            let big = (8 << 20) / size as u64;
            let counts: Vec<u64> = (0..w)
                .map(|p| match (round + p) % 4 {
                    0 => 0,
                    1 => rng.random_range(1..5000),
                    2 => rng.random_range(100_000..300_000),
                    _ => big - rng.random_range(0..1000),
                })
                .collect();
            let total: u64 = counts.iter().sum();
            let starts: Vec<usize> = counts
                .iter()
                .scan(0usize, |at, &c| {
                    Some(std::mem::replace(at, *at + c as usize))
                })
                .collect();
            // AllGatherV inputs (rank p's count) and ReduceScatterV inputs (the total).
            let gather_in: Vec<Vec<u8>> = counts
                .iter()
                .map(|&c| random_elements(rng, dtype, op, c as usize))
                .collect();
            let gathered = gather_in.concat();
            let reduce_in: Vec<Vec<u8>> = (0..w)
                .map(|_| random_elements(rng, dtype, op, total as usize))
                .collect();
            let capacity = total as usize * size;
            let what = format!("world {world} {dtype:?} {op:?} counts {counts:?}");
            assert_every_rank_passes(&what, gpu, world, |ctx, stream| {
                let r = ctx.rank() as usize;
                let mut errors = Vec::new();
                let mut counts_dev = stream.alloc_zeros::<u64>(w).unwrap();
                stream.memcpy_htod(&counts, &mut counts_dev).unwrap();
                let c = Counts {
                    addr: Span::from_device(&counts_dev, stream).addr,
                    max_count: big,
                };
                let o = Options::default();
                let src = filled(ctx, stream, capacity, &gather_in[r]);
                let dst = filled(ctx, stream, capacity, &[]);
                let mut plain = stream.alloc_zeros::<u8>(capacity.max(16)).unwrap();
                stream
                    .memcpy_htod(&vec![POISON; capacity.max(16)], &mut plain)
                    .unwrap();
                let (d, s, pulled) = (dst.local(), src.local(), Span::from_device(&plain, stream));
                // SAFETY: every buffer holds what the counts describe and lives past the
                // synchronisation.
                let launched = unsafe {
                    collective::all_gather_v_raw(ctx, dtype, d, s, c, &o)
                        .and_then(|_| collective::all_gather_v_raw(ctx, dtype, pulled, s, c, &o))
                };
                if let Err(e) = launched.and_then(|_| ctx.synchronize()) {
                    errors.push(format!("rank {r}: all_gather_v: {e}"));
                    return errors;
                }
                for (what, got) in [
                    ("pushed", stream.clone_dtoh(&dst).unwrap()),
                    ("pulled", stream.clone_dtoh(&plain).unwrap()),
                ] {
                    if got[..capacity] != gathered[..] {
                        errors.push(format!("rank {r}: all_gather_v {what} differs"));
                    }
                }
                let src = {
                    src.free().unwrap();
                    filled(ctx, stream, capacity, &reduce_in[r])
                };
                let s = src.local();
                let part = counts[r] as usize * size;
                // SAFETY: as above.
                let launched =
                    unsafe { collective::reduce_scatter_v_raw(ctx, dtype, op, d, s, c, &o) };
                if let Err(e) = launched.and_then(|_| ctx.synchronize()) {
                    errors.push(format!("rank {r}: reduce_scatter_v: {e}"));
                } else {
                    let at = starts[r] * size;
                    let srcs: Vec<&[u8]> = reduce_in.iter().map(|v| &v[at..at + part]).collect();
                    let got = stream.clone_dtoh(&dst).unwrap();
                    if got[..part] != reference_f32(dtype, op, &srcs)[..] {
                        errors.push(format!("rank {r}: reduce_scatter_v differs"));
                    }
                }
                src.free().unwrap();
                dst.free().unwrap();
                errors
            });
            *ran += 1;
        }
    });
}

/// The typed forms take symmetric buffers like cudarc buffers; in place (AllReduce on one
/// buffer, AllGather of the rank's own part) through the raw forms.
#[test]
fn typed_and_in_place_calls_over_symmetric_buffers() {
    let (dtype, op) = (DataType::Bf16, ReduceOpKind::Sum);
    for_every_world("typed symmetric collectives", |gpu, rng, world, ran| {
        let w = world as usize;
        let n = 1 << 20;
        let inputs: Vec<Vec<u8>> = (0..w).map(|_| random_elements(rng, dtype, op, n)).collect();
        let srcs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
        let sum = reference_f32(dtype, op, &srcs);
        let gathered = inputs.concat();
        assert_every_rank_passes(&format!("world {world}"), gpu, world, |ctx, stream| {
            let r = ctx.rank() as usize;
            let mut errors = Vec::new();
            let as_bf16 = |b: &[u8]| -> Vec<bf16> {
                b.chunks(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]))
                    .collect()
            };
            // Typed AllReduce, bf16, into another symmetric buffer.
            let mut src = SymmetricBuffer::<bf16>::new(ctx, n).unwrap();
            let mut dst = SymmetricBuffer::<bf16>::new(ctx, n).unwrap();
            stream.memcpy_htod(&as_bf16(&inputs[r]), &mut src).unwrap();
            purlin::all_reduce(ctx, &src, &mut dst, n, op).unwrap();
            ctx.synchronize().unwrap();
            if stream.clone_dtoh(&dst).unwrap() != as_bf16(&sum) {
                errors.push(format!("rank {r}: typed all_reduce"));
            }
            // In place: AllReduce with src == dst.
            let (span, o) = (src.local(), Options::default());
            // SAFETY: the buffer holds n elements and outlives the synchronisation.
            unsafe { Coll::Ar.raw(ctx, dtype, op, span, span, n as u64, &o) }.unwrap();
            ctx.synchronize().unwrap();
            if stream.clone_dtoh(&src).unwrap() != as_bf16(&sum) {
                errors.push(format!("rank {r}: in-place all_reduce"));
            }
            // In place: AllGather, the rank's input being its part of the output.
            let mut out = SymmetricBuffer::<bf16>::new(ctx, n * w).unwrap();
            let mut host = vec![bf16::from_bits(0xffff); n * w];
            host[r * n..(r + 1) * n].copy_from_slice(&as_bf16(&inputs[r]));
            stream.memcpy_htod(&host, &mut out).unwrap();
            let whole = out.local();
            let mine = whole.slice((r * n * 2) as u64, (n * 2) as u64).unwrap();
            // SAFETY: as above.
            unsafe { Coll::Ag.raw(ctx, dtype, op, whole, mine, n as u64, &o) }.unwrap();
            ctx.synchronize().unwrap();
            if stream.clone_dtoh(&out).unwrap() != as_bf16(&gathered) {
                errors.push(format!("rank {r}: in-place all_gather"));
            }
            for b in [src, dst, out] {
                b.free().unwrap();
            }
            errors
        });
        *ran += 1;
    });
}

/// Calls queued back to back on every rank's stream with one synchronise at the end, sizes and
/// kinds changing from call to call, each call on its own slice of two large symmetric buffers
/// (the same offsets on every rank), every third call on ordinary buffers instead: every output
/// of every call is checked after the end.
#[test]
fn queued_calls_over_symmetric_slices() {
    for_every_world("queued symmetric collectives", |gpu, rng, world, ran| {
        let w = world as usize;
        let calls = 40;
        // (collective, elements per part, dtype, op, offset of src and dst, ordinary)
        let mut plan = Vec::new();
        let (mut src_at, mut dst_at) = (0usize, 0usize);
        for i in 0..calls {
            let coll = [Coll::Ar, Coll::Ag, Coll::Rs, Coll::A2a][rng.random_range(0..4)];
            let count = [1usize, 700, 20_000, 300_000][rng.random_range(0..4)];
            let dtype = [DataType::Bf16, DataType::F32, DataType::F16][rng.random_range(0..3)];
            let op = ReduceOpKind::ALL[rng.random_range(0..3)];
            let (inputs, want) = case(rng, coll, w, dtype, op, count);
            let (sl, dl) = (inputs[0].len(), want[0].len());
            plan.push((
                coll,
                count,
                dtype,
                op,
                src_at,
                dst_at,
                i % 3 == 2,
                inputs,
                want,
            ));
            src_at += sl.div_ceil(256) * 256;
            dst_at += dl.div_ceil(256) * 256;
        }
        assert_every_rank_passes(&format!("world {world}"), gpu, world, |ctx, stream| {
            let r = ctx.rank() as usize;
            let mut src_host = vec![0u8; src_at.max(16)];
            for (_, _, _, _, s, _, _, inputs, _) in &plan {
                src_host[*s..*s + inputs[r].len()].copy_from_slice(&inputs[r]);
            }
            let src = filled(ctx, stream, src_at, &src_host);
            let dst = filled(ctx, stream, dst_at, &[]);
            let plain_src = stream.clone_htod(&src_host).unwrap();
            let plain_dst = stream.clone_htod(&vec![POISON; dst_at.max(16)]).unwrap();
            let (sym_s, sym_d, o) = (src.local(), dst.local(), Options::default());
            let (ord_s, ord_d) = (
                Span::from_device(&plain_src, stream),
                Span::from_device(&plain_dst, stream),
            );
            for (i, (coll, count, dtype, op, s, d, ordinary, inputs, want)) in
                plan.iter().enumerate()
            {
                let (sb, db) = if *ordinary {
                    (ord_s, ord_d)
                } else {
                    (sym_s, sym_d)
                };
                let s = sb.slice(*s as u64, inputs[r].len() as u64).unwrap();
                let d = db.slice(*d as u64, want[r].len() as u64).unwrap();
                // SAFETY: both slices lie in buffers that outlive the synchronisation.
                if let Err(e) = unsafe { coll.raw(ctx, *dtype, *op, d, s, *count as u64, &o) } {
                    return vec![format!("rank {r} call {i}: {e}")];
                }
            }
            if let Err(e) = ctx.synchronize() {
                return vec![format!("rank {r}: {e}")];
            }
            let (sym_out, ord_out) = (
                stream.clone_dtoh(&dst).unwrap(),
                stream.clone_dtoh(&plain_dst).unwrap(),
            );
            let mut errors = Vec::new();
            for (i, (coll, count, dtype, _, _, d, ordinary, _, want)) in plan.iter().enumerate() {
                let out = if *ordinary { &ord_out } else { &sym_out };
                if out[*d..*d + want[r].len()] != want[r][..] {
                    errors.push(format!(
                        "rank {r} call {i} {coll:?} {count} {}",
                        dtype.name()
                    ));
                }
            }
            src.free().unwrap();
            dst.free().unwrap();
            errors
        });
        *ran += 1;
    });
}

/// One rank passes an ordinary output while its peers pass symmetric ones (so it would pull
/// while they push): every rank's call fails (the pushing ranks name the buffers) instead of
/// hanging or writing into an output its owner did not pass.
#[test]
fn ranks_that_pass_different_buffers_fail_and_name_them() {
    let gpu = gpu_or_return!("symmetric mismatch");
    let world = 4u32;
    let n = 1usize << 20;
    let outcomes = virtual_node(
        &gpu,
        world,
        WorkspaceRequirements::small(),
        |ctx, stream| {
            ctx.set_timeout(Duration::from_secs(5));
            let r = ctx.rank() as usize;
            let src = filled(ctx, stream, n, &vec![1u8; n]);
            let dst = filled(ctx, stream, n * world as usize, &[]);
            let plain = stream
                .clone_htod(&vec![POISON; n * world as usize])
                .unwrap();
            let d = if r == 1 {
                Span::from_device(&plain, stream)
            } else {
                dst.local()
            };
            let started = std::time::Instant::now();
            // SAFETY: both buffers hold what the call moves and outlive the synchronisation.
            let outcome = unsafe {
                collective::all_gather_raw(
                    ctx,
                    DataType::Bf16,
                    d,
                    src.local(),
                    (n / 2) as u64,
                    &Options::default(),
                )
            }
            .and_then(|_| ctx.synchronize());
            let elapsed = started.elapsed();
            let untouched = stream
                .clone_dtoh(&plain)
                .unwrap()
                .iter()
                .all(|&b| b == POISON);
            // The context is poisoned now: the buffers' teardown still meets.
            drop((src, dst));
            (outcome, elapsed, untouched)
        },
    );
    for (r, (outcome, elapsed, _)) in outcomes.iter().enumerate() {
        assert!(outcome.is_err(), "rank {r} succeeded");
        assert!(
            *elapsed < Duration::from_secs(30),
            "rank {r} took {elapsed:?}"
        );
    }
    assert!(outcomes[1].2, "rank 1's ordinary output was written");
    let named = outcomes.iter().any(|(o, _, _)| {
        matches!(
            o,
            Err(Error::Mismatch {
                field: "symmetric buffers",
                ..
            })
        )
    });
    assert!(named, "no rank named the buffers: {outcomes:?}");
}

/// Buffers of different sizes on different ranks are refused on every rank.
#[test]
fn symmetric_buffers_of_different_sizes_are_refused() {
    let gpu = gpu_or_return!("symmetric sizes");
    let outcomes = virtual_node(&gpu, 2, WorkspaceRequirements::small(), |ctx, _| {
        SymmetricBuffer::<f32>::new(ctx, 1000 + ctx.rank() as usize).map(drop)
    });
    for (r, o) in outcomes.iter().enumerate() {
        assert!(
            matches!(o, Err(Error::InvalidArgument { .. })),
            "rank {r}: {o:?}"
        );
    }
}
