//! What the GPU collectives refuse and how faults spread, on the virtual node: V counts past
//! the output (a typed refusal, guard bytes untouched), ranks whose calls differ (an error
//! naming both ranks and the field within 100 ms), and a refusing rank stopping its peers within
//! 100 ms — with a 10 s wait bound, so none of it is a timeout.

use crate::support::{assert_every_rank_passes, virtual_node};
use cudarc::driver::CudaStream;
use purlin::collective::{self, Counts, Options};
use purlin::memory::Span;
use purlin::workspace::WorkspaceRequirements;
use purlin::{Context, DataType, Error, Gpu, ReduceOpKind};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_millis(100);

/// A virtual node of `world` ranks on the small workspace whose waits end after 10 s, so a
/// fault that does not spread shows as a missed `BOUND`, never as a hang.
fn virtual_node_with_wait_bound<R: Send>(
    gpu: &Arc<Gpu>,
    world: u32,
    body: impl Fn(&mut Context, &Arc<CudaStream>) -> R + Sync,
) -> Vec<R> {
    virtual_node(gpu, world, WorkspaceRequirements::small(), |ctx, stream| {
        ctx.set_timeout(Duration::from_secs(10));
        body(ctx, stream)
    })
}

/// AllGatherV whose counts need more than rank 1's output span: rank 1 refuses (naming the
/// count), the others stop through its abort record, and the bytes past rank 1's span stay as
/// they were.
#[test]
fn v_counts_past_the_output_are_refused_and_spread_within_100_ms() {
    let gpu = gpu_or_return!("gpu v counts past capacity");
    let world = 4u32;
    let outcomes = virtual_node_with_wait_bound(&gpu, world, |ctx, stream| {
        let r = ctx.rank();
        let count = 1000u64;
        let src = stream.clone_htod(&vec![r as u8; 4000]).unwrap();
        let dst = stream.clone_htod(&vec![0xa5u8; 16000 + 4096]).unwrap();
        let counts = stream.clone_htod(&vec![count; world as usize]).unwrap();
        stream.synchronize().unwrap();
        // Rank 1 declares an output of 1 KiB: the counts need 16 000 bytes.
        let dst_bytes = if r == 1 { 1024 } else { 16000 };
        let d = Span::new(Span::from_device(&dst, stream).addr, dst_bytes);
        let s = Span::from_device(&src, stream);
        let c = Counts {
            addr: Span::from_device(&counts, stream).addr,
            max_count: count,
        };
        let started = Instant::now();
        // SAFETY: the spans lie inside live buffers of this rank's stream, which outlive the
        // synchronise; the kernel checks the counts against the spans.
        let launched = unsafe {
            collective::all_gather_v_raw(ctx, DataType::F32, d, s, c, &Options::default())
        };
        let synced = launched.and_then(|()| ctx.synchronize());
        let elapsed = started.elapsed();
        let after = stream.clone_dtoh(&dst).unwrap();
        (r, synced, elapsed, after)
    });
    for (r, result, elapsed, after) in outcomes {
        assert!(elapsed < BOUND, "rank {r}: {elapsed:?} ({result:?})");
        match (r, &result) {
            (1, Err(Error::Refused { reason, .. })) => {
                assert!(reason.contains("output buffer smaller"), "{reason}");
                assert!(
                    after.iter().all(|&b| b == 0xa5),
                    "rank 1's output was written"
                );
            }
            (
                _,
                Err(Error::PeerFaulted {
                    first: 1, cause, ..
                }),
            ) => {
                assert!(cause.contains("refused"), "rank {r}: {cause}");
            }
            _ => panic!("rank {r}: {result:?}"),
        }
    }
    println!("v counts past capacity: refused on rank 1, peers stopped within {BOUND:?}");
}

/// Two ranks whose AllReduce sizes differ: both report the mismatch, naming each other and the
/// size, within 100 ms.
#[test]
fn ranks_whose_calls_differ_are_named_within_100_ms() {
    let gpu = gpu_or_return!("gpu digest mismatch");
    for world in [2u32, 8] {
        let outcomes = virtual_node_with_wait_bound(&gpu, world, |ctx, stream| {
            let r = ctx.rank();
            // Rank 0 reduces 64 Ki floats, every other rank 32 Ki.
            let count = if r == 0 { 64 << 10 } else { 32 << 10 };
            let src = stream.alloc_zeros::<f32>(64 << 10).unwrap();
            let mut dst = stream.alloc_zeros::<f32>(64 << 10).unwrap();
            stream.synchronize().unwrap();
            let started = Instant::now();
            let synced = collective::all_reduce(ctx, &src, &mut dst, count, ReduceOpKind::Sum)
                .and_then(|()| ctx.synchronize());
            (r, synced, started.elapsed())
        });
        let mut named = 0;
        for (r, result, elapsed) in outcomes {
            assert!(
                elapsed < BOUND,
                "world {world} rank {r}: {elapsed:?} ({result:?})"
            );
            match &result {
                Err(Error::Mismatch {
                    rank, peer, field, ..
                }) => {
                    assert_eq!(*field, "size", "{result:?}");
                    assert!(*rank == 0 || *peer == 0, "{result:?}");
                    named += 1;
                }
                Err(Error::PeerFaulted { cause, .. }) => {
                    assert!(cause.contains("disagree"), "{cause}");
                }
                other => panic!("world {world} rank {r}: {other:?}"),
            }
        }
        assert!(named >= 1, "world {world}: no rank named the mismatch");
    }
    println!("digest mismatch: named within {BOUND:?} at worlds 2 and 8");
}

/// What the host refuses before anything is launched, on the virtual node: a typed collective
/// whose buffer belongs to another stream (it could be freed while the call still reads it), a
/// kernel of yours with more threads per block than the native Atom is laid out for; and the
/// workspace counts the ranks that share this GPU (all of them, here), which caps the blocks.
#[test]
fn host_checks_refuse_before_launching_and_count_the_ranks_on_this_gpu() {
    let gpu = gpu_or_return!("host checks");
    let threads = purlin::collective::atom_threads(gpu.arch());
    for world in [2u32, 4] {
        assert_every_rank_passes(
            &gpu,
            world,
            WorkspaceRequirements::small(),
            |ctx, stream| {
                let mut failures = Vec::new();
                if ctx.workspace().ranks_on_this_gpu() != world {
                    failures.push(format!(
                        "ranks_on_this_gpu {} on a virtual node of {world}",
                        ctx.workspace().ranks_on_this_gpu()
                    ));
                }
                let (shape, _) = ctx
                    .plan(
                        collective::CollectiveKind::AllGather,
                        1 << 24,
                        &Options::default(),
                    )
                    .unwrap();
                if shape.blocks > (gpu.sm_count() / world).max(1) {
                    failures.push(format!(
                        "{} blocks for {world} ranks on one GPU",
                        shape.blocks
                    ));
                }
                // A buffer of another stream: refused by the typed call, nothing launched.
                let other = gpu.new_stream().unwrap();
                let foreign = other.alloc_zeros::<f32>(64).unwrap();
                let mut dst = stream.alloc_zeros::<f32>(64).unwrap();
                match collective::all_reduce(ctx, &foreign, &mut dst, 64, ReduceOpKind::Sum) {
                    Err(Error::InvalidArgument { what: "src", .. }) => {}
                    other => failures.push(format!("foreign src: {other:?}")),
                }
                // Too many threads for the Atom: refused by Context::launch.
                // SAFETY: refused before launching.
                const K: purlin::launch::Kernel<(u64,)> =
                    unsafe { purlin::launch::Kernel::new("purlin_all_gather") };
                let shape = purlin::launch::LaunchShape {
                    blocks: 1,
                    threads: 2 * threads,
                    smem_bytes: 320,
                };
                // SAFETY: refused before launching (the shape is checked first).
                match unsafe { ctx.launch(&K, shape, (0,)) } {
                    Err(Error::InvalidLaunch(_)) => {}
                    other => failures.push(format!("{} threads: {other:?}", 2 * threads)),
                }
                // The context is still usable: a real call after the refusals runs.
                let src = stream.alloc_zeros::<f32>(64).unwrap();
                if let Err(e) = collective::all_reduce(ctx, &src, &mut dst, 64, ReduceOpKind::Sum)
                    .and_then(|_| ctx.synchronize())
                {
                    failures.push(format!("the call after the refusals: {e}"));
                }
                failures
            },
        );
    }
    println!("host checks refused the foreign buffer and the oversized block at worlds 2 and 4");
}

/// A window's stream wait whose signal never comes ends after the context's timeout: the
/// stream goes on (work queued behind it runs), `synchronize` returns a timeout naming the
/// peer and the awaited value within the bound plus 100 ms, and the context poisons and tears
/// down without hanging. Before, the wait was the driver's `cuStreamWaitValue64`, which has
/// no bound: this test hung in its first `synchronize`.
#[test]
fn a_stream_wait_whose_signal_never_comes_times_out_and_tears_down() {
    let gpu = gpu_or_return!("bounded stream wait");
    let bound = Duration::from_millis(200);
    let outcomes = virtual_node(&gpu, 2, WorkspaceRequirements::small(), |ctx, stream| {
        ctx.set_timeout(bound);
        let window = purlin::p2p::Window::new(ctx, 64).unwrap();
        let r = ctx.rank();
        let peer = 1 - r;
        // Signalled: passes.
        window.signal(ctx, peer, 1).unwrap();
        window.wait(ctx, peer, 1, Duration::from_secs(10)).unwrap();
        window.wait_on_stream(ctx, peer, 1).unwrap();
        ctx.synchronize().unwrap();
        // Never signalled: the wait ends, a copy queued behind it still runs.
        let start = Instant::now();
        window.wait_on_stream(ctx, peer, 5).unwrap();
        let behind = stream.clone_htod(&[7u8; 16]).unwrap();
        let result = ctx.synchronize();
        let took = start.elapsed();
        let copied = stream.clone_dtoh(&behind).unwrap() == vec![7u8; 16];
        let poisoned = ctx.ensure_usable().is_err();
        drop(window);
        (r, result, took, copied, poisoned)
    });
    for (r, result, took, copied, poisoned) in outcomes {
        match result {
            Err(Error::Timeout {
                collective: "p2p wait",
                rank,
                peer,
                epoch: 5,
                ..
            }) if rank == r && peer == 1 - r => {}
            other => panic!(
                "rank {r}: expected a p2p-wait timeout naming rank {}, got {other:?}",
                1 - r
            ),
        }
        assert!(
            took < bound + Duration::from_millis(100),
            "rank {r}: {took:?}"
        );
        assert!(
            copied,
            "rank {r}: the copy queued behind the wait did not run"
        );
        assert!(
            poisoned,
            "rank {r}: the context is still usable after the timeout"
        );
    }
    println!("bounded stream wait: both ranks timed out within {bound:?} + 100 ms and tore down");
}
