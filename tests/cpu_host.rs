//! The host shim without a GPU: workspace layout arithmetic, argument validation (every bad
//! input gets its error and launches nothing), the in-process bootstrap, and the context
//! lifecycle over host memory — including real collectives of the CPU emulation running on a
//! `purlin::Context`'s device view, and p2p windows.

use proptest::prelude::*;
use purlin::bootstrap::{Bootstrap, InProcess, run_in_process};
use purlin::launch::{DeviceLimits, LaunchShape};
use purlin::memory::{Allocator, HostAllocator, Memory, Span};
use purlin::p2p::{Window, plan_put};
use purlin::validate;
use purlin::workspace::{STATE_BYTES, Workspace, WorkspaceRequirements};
use purlin::{Context, Error};
use purlin_device::context::{LocalState, MAX_RANKS, WorkspaceLayout};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::Duration;

const SMALL: WorkspaceRequirements = WorkspaceRequirements::small();

// ---------------------------------------------------------------- layout arithmetic

#[test]
fn default_requirements_are_the_originals() {
    let d = WorkspaceRequirements::default();
    assert_eq!(d.staging_half_bytes, 256 << 20);
    assert_eq!(d.latency_window_bytes, 4 << 20);
    for world in 1..=MAX_RANKS as u32 {
        let l = d.layout(world);
        assert_eq!(
            l.staging_bytes(),
            2 * (256 << 20) + 2 * world as u64 * (4 << 20)
        );
        assert_eq!(l.latency_offset(0), 2 * (256 << 20));
        assert_eq!(
            l.latency_offset(1),
            2 * (256 << 20) + world as u64 * (4 << 20)
        );
        let slab = d.slab_bytes(world).unwrap();
        assert_eq!(slab, d.signal_offset(world).unwrap() + l.signal_bytes());
        assert_eq!(d.bytes_per_rank(world).unwrap(), slab + STATE_BYTES);
    }
}

#[test]
fn bad_requirements_are_refused() {
    let bad = [
        WorkspaceRequirements {
            staging_half_bytes: 0,
            ..SMALL
        },
        WorkspaceRequirements {
            staging_half_bytes: 1000,
            ..SMALL
        },
        WorkspaceRequirements {
            latency_window_bytes: 16,
            ..SMALL
        },
        WorkspaceRequirements {
            latency_window_bytes: 40,
            ..SMALL
        },
    ];
    for req in bad {
        assert!(
            matches!(req.check(), Err(Error::InvalidRequirements { .. })),
            "{req:?}"
        );
        assert!(req.bytes_per_rank(2).is_err());
    }
    // Sizes that overflow are errors, not panics.
    let huge = WorkspaceRequirements {
        staging_half_bytes: !15,
        ..SMALL
    };
    assert!(huge.bytes_per_rank(16).is_err());
    // World bounds.
    assert!(matches!(
        SMALL.bytes_per_rank(0),
        Err(Error::WorldSize { world: 0, .. })
    ));
    assert!(matches!(
        SMALL.bytes_per_rank(17),
        Err(Error::WorldSize { world: 17, .. })
    ));
}

proptest! {
    #[test]
    fn layout_invariants(world in 1u32..=16, half in 1u64..(1 << 24), window in 2u64..(1 << 16)) {
        let req = WorkspaceRequirements { staging_half_bytes: half * 16, latency_window_bytes: window * 16 };
        prop_assert!(req.check().is_ok());
        let l: WorkspaceLayout = req.layout(world);
        let off = req.signal_offset(world).unwrap();
        prop_assert_eq!(off % 256, 0);
        prop_assert!(off >= l.staging_bytes() && off - l.staging_bytes() < 256);
        prop_assert_eq!(l.latency_offset(0), 2 * req.staging_half_bytes);
        prop_assert_eq!(l.latency_offset(1) - l.latency_offset(0), world as u64 * req.latency_window_bytes);
        prop_assert_eq!(l.latency_offset(1) + world as u64 * req.latency_window_bytes, l.staging_bytes());
        prop_assert_eq!(req.bytes_per_rank(world).unwrap(), off + l.signal_bytes() + l.state_bytes());
        // Every part a 16-byte access can use is 16-byte aligned.
        prop_assert_eq!(l.latency_offset(1) % 16, 0);
    }
}

// ---------------------------------------------------------------- validation

#[test]
fn every_bad_input_gets_its_error() {
    // Null and unaligned pointers.
    assert!(matches!(
        validate::check_buffer("src", Span::new(0, 64), 64, 16),
        Err(Error::NullPointer { what: "src" })
    ));
    assert!(matches!(
        validate::check_buffer("dst", Span::new(0x1004, 64), 64, 16),
        Err(Error::Misaligned {
            what: "dst",
            addr: 0x1004,
            align: 16
        })
    ));
    // A count that is not a whole number of elements.
    for (bytes, size) in [(3u64, 2usize), (5, 4), (7, 4), (1, 2)] {
        assert!(matches!(
            validate::check_count(bytes, size),
            Err(Error::PartialElement { .. })
        ));
    }
    assert_eq!(validate::check_count(4096, 2).unwrap(), 2048);
    assert!(validate::elements_to_bytes("count", u64::MAX / 2, 4).is_err());
    // Ranks outside 0..world.
    assert!(matches!(
        validate::check_rank(4, 4),
        Err(Error::RankOutOfRange { rank: 4, world: 4 })
    ));
    assert!(matches!(
        validate::check_rank(u32::MAX, 16),
        Err(Error::RankOutOfRange { .. })
    ));
    // World above the maximum, zero, or not the bootstrap's.
    assert!(matches!(
        validate::check_world(MAX_RANKS as u32 + 1),
        Err(Error::WorldSize { .. })
    ));
    assert!(matches!(
        validate::check_world(0),
        Err(Error::WorldSize { .. })
    ));
    assert!(matches!(
        validate::check_membership(0, 2, 0, 4),
        Err(Error::WorldMismatch {
            world: 2,
            bootstrap: 4
        })
    ));
    assert!(matches!(
        validate::check_membership(2, 4, 1, 4),
        Err(Error::InvalidArgument { what: "rank", .. })
    ));
    // A buffer too small.
    assert!(matches!(
        validate::check_buffer("dst", Span::new(0x1000, 100), 128, 16),
        Err(Error::BufferTooSmall {
            what: "dst",
            needed: 128,
            available: 100
        })
    ));
    assert!(matches!(
        validate::check_range("w", u64::MAX, 2, 10),
        Err(Error::BufferTooSmall { .. })
    ));
    // A device that cannot reach a peer.
    let pairs = |a: usize, b: usize| a / 2 == b / 2;
    assert!(matches!(
        validate::check_reachable(0, &[0, 1, 2], pairs),
        Err(Error::PeerUnreachable { from: 0, to: 2 })
    ));
    assert!(validate::check_reachable(3, &[2, 3], pairs).is_ok());
}

#[test]
fn bad_puts_and_launch_shapes_are_refused() {
    let w = Span::new(0x10000, 1 << 20);
    let src = Span::new(0x200000, 4096);
    assert!(plan_put(w, 2, 1, 0, src).is_ok());
    assert!(plan_put(w, 2, 1, 0, Span::new(0, 0)).is_ok()); // empty: nothing is touched
    type Case = (u32, u64, Span, fn(&Error) -> bool);
    let cases: [Case; 6] = [
        (2, 0, src, |e| matches!(e, Error::RankOutOfRange { .. })),
        (1, 8, src, |e| {
            matches!(
                e,
                Error::Misaligned {
                    what: "destination",
                    ..
                }
            )
        }),
        (1, 0, Span::new(0x200001, 16), |e| {
            matches!(e, Error::Misaligned { what: "src", .. })
        }),
        (1, 0, Span::new(0, 16), |e| {
            matches!(e, Error::NullPointer { what: "src" })
        }),
        (1, (1 << 20) - 16, Span::new(0x200000, 32), |e| {
            matches!(e, Error::BufferTooSmall { .. })
        }),
        (1, u64::MAX - 8, src, |e| {
            matches!(e, Error::BufferTooSmall { .. })
        }),
    ];
    for (peer, offset, src, ok) in cases {
        let e = plan_put(w, 2, peer, offset, src).unwrap_err();
        assert!(ok(&e), "peer {peer} offset {offset}: {e}");
    }

    let limits = DeviceLimits {
        max_threads_per_block: 1024,
        max_smem_per_block: 227 << 10,
        max_blocks: 65535,
    };
    for bad in [
        LaunchShape {
            blocks: 0,
            threads: 128,
            smem_bytes: 0,
        },
        LaunchShape {
            blocks: 65536,
            threads: 128,
            smem_bytes: 0,
        },
        LaunchShape {
            blocks: 1,
            threads: 0,
            smem_bytes: 0,
        },
        LaunchShape {
            blocks: 1,
            threads: 1025,
            smem_bytes: 0,
        },
        LaunchShape {
            blocks: 1,
            threads: 128,
            smem_bytes: (227 << 10) + 1,
        },
    ] {
        assert!(
            matches!(bad.check(&limits), Err(Error::InvalidLaunch(_))),
            "{bad:?}"
        );
    }
    for atom in purlin::atom::AtomKind::ALL {
        assert!(LaunchShape::for_atom(atom, 8).check(&limits).is_ok());
    }
    assert_eq!(
        purlin::launch::arch_from_code(1000),
        Some(purlin::ptx::Arch::Sm100)
    );
    assert_eq!(purlin::launch::arch_from_code(0), None);
}

// ---------------------------------------------------------------- bootstrap

#[test]
fn in_process_all_gather_many_rounds() {
    let rounds = 500;
    let out = run_in_process(8, |b| {
        for round in 0..rounds {
            // Different lengths per rank and round.
            let mine = vec![b.rank() as u8; (b.rank() as usize + round) % 5];
            let all = b.all_gather(&mine)?;
            for (r, v) in all.iter().enumerate() {
                assert_eq!(*v, vec![r as u8; (r + round) % 5]);
            }
            if round % 50 == 0 {
                b.barrier()?;
            }
        }
        Ok(b.rank())
    })
    .unwrap();
    assert_eq!(out, (0..8).collect::<Vec<_>>());
    assert!(InProcess::group(0).is_err());
    assert!(InProcess::group(17).is_err());
}

#[test]
fn in_process_missing_rank_times_out_and_breaks_the_group() {
    let ranks = InProcess::group_with_timeout(3, Duration::from_millis(50)).unwrap();
    let (r0, r1) = (ranks[0].clone(), ranks[1].clone());
    let results: Vec<_> = std::thread::scope(|s| {
        let a = s.spawn(move || r0.barrier());
        let b = s.spawn(move || r1.barrier());
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    for r in results {
        assert!(matches!(r, Err(Error::Bootstrap(m)) if m.contains("[2]")));
    }
    // The group refuses every later exchange at once.
    assert!(matches!(ranks[2].barrier(), Err(Error::Bootstrap(_))));
}

#[test]
fn in_process_rank_joining_twice_is_refused() {
    let ranks = InProcess::group_with_timeout(2, Duration::from_secs(5)).unwrap();
    let twin = ranks[0].clone();
    let first = std::thread::scope(|s| {
        let a = s.spawn(|| ranks[0].all_gather(b"a"));
        // Give the first a head start so the twin is the second to join.
        std::thread::sleep(Duration::from_millis(50));
        let e = twin.all_gather(b"b");
        assert!(matches!(e, Err(Error::Bootstrap(m)) if m.contains("twice")));
        ranks[1].all_gather(b"c").unwrap();
        a.join().unwrap()
    });
    assert_eq!(first.unwrap(), vec![b"a".to_vec(), b"c".to_vec()]);
}

// ---------------------------------------------------------------- context lifecycle

/// Host memory, counting live allocations and bytes, failing on demand.
#[derive(Debug, Default)]
struct Counting {
    live_bytes: AtomicI64,
    live: AtomicI64,
    /// Fail the n-th allocation (1-based) of this allocator; 0 = never.
    fail_at: AtomicU32,
    calls: AtomicU32,
    misalign: bool,
}

// SAFETY: forwards to `HostAllocator` (or fails); the misaligning variant is refused by the
// workspace before anything uses the address (that is what the test checks).
unsafe impl Allocator for Counting {
    fn memory(&self) -> Memory {
        Memory::Host
    }
    fn allocate(&self, bytes: u64) -> purlin::Result<u64> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.fail_at.load(Ordering::SeqCst) {
            return Err(Error::InvalidArgument {
                what: "bytes",
                reason: "injected failure".into(),
            });
        }
        let p = HostAllocator::new().allocate(bytes + 16)?;
        self.live.fetch_add(1, Ordering::SeqCst);
        self.live_bytes.fetch_add(bytes as i64, Ordering::SeqCst);
        Ok(if self.misalign { p + 8 } else { p })
    }
    unsafe fn free(&self, addr: u64, bytes: u64) -> purlin::Result<()> {
        self.live.fetch_sub(1, Ordering::SeqCst);
        self.live_bytes.fetch_sub(bytes as i64, Ordering::SeqCst);
        let addr = if self.misalign { addr - 8 } else { addr };
        // SAFETY: forwarded contract (the same size as allocated).
        unsafe { HostAllocator::new().free(addr, bytes + 16) }
    }
}

impl Counting {
    fn assert_nothing_live(&self) {
        assert_eq!(self.live.load(Ordering::SeqCst), 0, "allocations leaked");
        assert_eq!(self.live_bytes.load(Ordering::SeqCst), 0, "bytes leaked");
    }
}

fn host_context(b: &InProcess, alloc: &Arc<Counting>) -> purlin::Result<Context> {
    let ws = Workspace::with_shared(Arc::new(b.clone()), alloc.clone(), SMALL)?;
    Context::new_host(b.rank(), b.world(), ws)
}

#[test]
fn device_view_matches_the_workspace() {
    for world in [1u32, 2, 3, 4, 8, 16] {
        let views = run_in_process(world, |b| {
            let ws = Workspace::new(&b, HostAllocator::new(), SMALL)?;
            let ctx = Context::new_host(b.rank(), world, ws)?;
            let v = ctx.device_view();
            assert_eq!((v.rank, v.world), (b.rank(), world));
            assert_eq!(v.staging_half_bytes, SMALL.staging_half_bytes);
            assert_eq!(v.latency_window_bytes, SMALL.latency_window_bytes);
            assert_eq!(
                v.timeout_ns,
                purlin::context::DEFAULT_TIMEOUT.as_nanos() as u64
            );
            for r in 0..MAX_RANKS {
                if r < world as usize {
                    assert_eq!(v.staging[r], ctx.workspace().staging(r as u32)?);
                    assert_eq!(v.signals[r], ctx.workspace().signals(r as u32)?);
                    assert_eq!(v.staging[r] % 256, 0);
                    assert_eq!(v.signals[r] % 256, 0);
                } else {
                    assert_eq!((v.staging[r], v.signals[r]), (0, 0));
                }
            }
            assert_eq!(v.state % 16, 0);
            // The state starts zeroed (epochs, counters, fault record).
            // SAFETY: host memory of this rank's state, LocalState::BYTES long.
            let state =
                unsafe { std::slice::from_raw_parts(v.state as *const u8, LocalState::BYTES) };
            assert!(state.iter().all(|&b| b == 0));
            let out = (v.staging, v.signals);
            ctx.finalize()?;
            Ok(out)
        })
        .unwrap();
        // Every rank sees the same, distinct, non-overlapping slabs.
        for v in &views {
            assert_eq!(*v, views[0]);
        }
        let mut bases: Vec<u64> = views[0].0[..world as usize].to_vec();
        bases.sort();
        let slab = SMALL.slab_bytes(world).unwrap();
        for w in bases.windows(2) {
            assert!(w[1] - w[0] >= slab);
        }
    }
}

#[test]
fn contexts_created_and_destroyed_100_times_leak_nothing() {
    let alloc = Arc::new(Counting::default());
    run_in_process(4, |b| {
        for i in 0..100 {
            let ctx = host_context(&b, &alloc)?;
            if i % 2 == 0 {
                ctx.finalize()?;
            } else {
                drop(ctx); // Drop tears down the same way
            }
        }
        Ok(())
    })
    .unwrap();
    alloc.assert_nothing_live();
    // Two allocations (slab, state) per rank per context.
    assert_eq!(alloc.calls.load(Ordering::SeqCst), 4 * 100 * 2);
}

#[test]
fn wrong_rank_or_world_fails_without_leaking() {
    let alloc = Arc::new(Counting::default());
    let errors = run_in_process(2, |b| {
        let ws = Workspace::with_shared(Arc::new(b.clone()), alloc.clone(), SMALL)?;
        // Rank 0 claims world 3, rank 1 claims to be rank 0: both refused; the workspace is
        // dropped (collectively) with the error.
        let r = if b.rank() == 0 {
            Context::new_host(0, 3, ws)
        } else {
            Context::new_host(0, 2, ws)
        };
        Ok(r.err())
    })
    .unwrap();
    assert!(matches!(
        errors[0],
        Some(Error::WorldMismatch {
            world: 3,
            bootstrap: 2
        })
    ));
    assert!(matches!(
        errors[1],
        Some(Error::InvalidArgument { what: "rank", .. })
    ));
    alloc.assert_nothing_live();
}

#[test]
fn a_rank_failing_to_allocate_fails_everyone_without_leaks_or_hangs() {
    // Slab allocation (1st call) and state allocation (2nd call) failing on one rank.
    for fail_at in [1, 2] {
        for failing in 0..3u32 {
            let allocs: Vec<Arc<Counting>> =
                (0..3).map(|_| Arc::new(Counting::default())).collect();
            allocs[failing as usize]
                .fail_at
                .store(fail_at, Ordering::SeqCst);
            let errors =
                run_in_process(
                    3,
                    |b| Ok(host_context(&b, &allocs[b.rank() as usize]).err()),
                )
                .unwrap();
            for (r, e) in errors.iter().enumerate() {
                match e {
                    Some(Error::InvalidArgument { reason, .. }) if r as u32 == failing => {
                        assert!(reason.contains("injected"))
                    }
                    Some(Error::PeerFailed { rank, .. }) => assert_eq!(*rank, failing),
                    other => panic!("rank {r}, failing {failing} at {fail_at}: {other:?}"),
                }
            }
            for a in &allocs {
                a.assert_nothing_live();
            }
        }
    }
}

#[test]
fn a_misaligned_allocator_is_refused() {
    let alloc = Arc::new(Counting {
        misalign: true,
        ..Default::default()
    });
    let errors = run_in_process(2, |b| Ok(host_context(&b, &alloc).err())).unwrap();
    assert!(errors.iter().all(|e| matches!(
        e,
        Some(Error::Misaligned { .. }) | Some(Error::PeerFailed { .. })
    )));
    alloc.assert_nothing_live();
}

#[test]
fn mismatched_requirements_fail_everywhere() {
    let alloc = Arc::new(Counting::default());
    let errors = run_in_process(2, |b| {
        let req = if b.rank() == 0 {
            SMALL
        } else {
            WorkspaceRequirements {
                staging_half_bytes: 2 << 20,
                ..SMALL
            }
        };
        Ok(Workspace::with_shared(Arc::new(b.clone()), alloc.clone(), req).err())
    })
    .unwrap();
    assert!(errors.iter().all(|e| e.is_some()), "{errors:?}");
    alloc.assert_nothing_live();
}

#[test]
fn timeout_travels_in_the_view_and_host_contexts_refuse_launches() {
    let b = InProcess::group(1).unwrap().remove(0);
    let mut ctx = Context::new_host(
        0,
        1,
        Workspace::new(&b, HostAllocator::new(), SMALL).unwrap(),
    )
    .unwrap();
    ctx.set_timeout(Duration::from_micros(1500));
    assert_eq!(ctx.device_view().timeout_ns, 1_500_000);
    assert_eq!(ctx.timeout(), Duration::from_micros(1500));
    // SAFETY: refused before anything runs.
    const K: purlin::launch::Kernel<(u64,)> = unsafe { purlin::launch::Kernel::new("k") };
    // SAFETY: the launch is refused (host context).
    let r = unsafe {
        ctx.launch(
            &K,
            LaunchShape {
                blocks: 1,
                threads: 1,
                smem_bytes: 0,
            },
            (0,),
        )
    };
    assert!(matches!(r, Err(Error::Unsupported(_))));
    ctx.finalize().unwrap();
}

// ---------------------------------------------------------------- collectives on a Context

/// Runs `collective` on every present rank's context: `blocks` CPU threads per rank, each one
/// block of the collective, with the context's device view (as a kernel would get it).
fn run_all_gather(ctx: &Context, src: &[u8], dst: &mut [u8], blocks: u32) {
    use purlin_device::atom::Host;
    use purlin_device::snac::{Runtime, SnacArgs, smem_bytes};
    let view = ctx.device_view();
    let (src_addr, dst_addr) = (src.as_ptr() as u64, dst.as_mut_ptr() as u64);
    let bytes = src.len() as u64;
    std::thread::scope(|s| {
        for block in 0..blocks {
            s.spawn(move || {
                let mut smem = vec![0u128; (smem_bytes::<Host>() as usize).div_ceil(16)];
                let mut args =
                    SnacArgs::new(dst_addr as *mut u8, src_addr as *const u8, bytes, blocks);
                args.block = block;
                args.smem = smem.as_mut_ptr().cast();
                // SAFETY: src holds `bytes`, dst `world × bytes`, both live until the scope
                // ends; every rank runs the same call with `blocks` blocks.
                unsafe { purlin_device::collective::all_gather::<Host, Runtime>(&args, &view) };
            });
        }
    });
}

#[test]
fn one_context_serves_many_collectives_on_the_cpu_emulation() {
    let world = 4u32;
    run_in_process(world, |b| {
        let ws = Workspace::new(&b, HostAllocator::new(), SMALL)?;
        let ctx = Context::new_host(b.rank(), world, ws)?;
        // Back-to-back AllGathers of changing sizes, some above the staging half (cyclic).
        for (i, bytes) in [16usize, 1, 4096, 3 << 20, 100, (1 << 20) + 48, 0, 64 << 10]
            .into_iter()
            .cycle()
            .take(24)
            .enumerate()
        {
            let src: Vec<u8> = (0..bytes)
                .map(|j| (j * 7 + i + b.rank() as usize * 31) as u8)
                .collect();
            let src = aligned(&src);
            let mut dst = aligned(&vec![0xffu8; bytes * world as usize]);
            run_all_gather(
                &ctx,
                &src.bytes()[..bytes],
                &mut dst.bytes_mut()[..bytes * world as usize],
                2,
            );
            ctx.synchronize()?;
            for r in 0..world as usize {
                let expect: Vec<u8> = (0..bytes).map(|j| (j * 7 + i + r * 31) as u8).collect();
                assert_eq!(
                    &dst.bytes()[r * bytes..(r + 1) * bytes],
                    &expect[..],
                    "call {i}, {bytes} B, from rank {r}"
                );
            }
        }
        ctx.finalize()
    })
    .unwrap();
}

#[test]
fn a_rank_that_never_joins_gives_a_timeout_naming_it() {
    let world = 3u32;
    let absent = 2u32;
    let errors = run_in_process(world, |b| {
        let ws = Workspace::new(&b, HostAllocator::new(), SMALL)?;
        let mut ctx = Context::new_host(b.rank(), world, ws)?;
        ctx.set_timeout(Duration::from_millis(200));
        let mut result = None;
        if b.rank() != absent {
            let src = aligned(&[1u8; 256]);
            let mut dst = aligned(&[0u8; 768]);
            run_all_gather(&ctx, src.bytes(), dst.bytes_mut(), 1);
            result = Some(ctx.synchronize());
            // A faulted context refuses further work.
            assert!(matches!(ctx.ensure_usable(), Err(Error::Poisoned { .. })));
        }
        ctx.finalize()?;
        Ok(result)
    })
    .unwrap();
    for (r, e) in errors.iter().enumerate() {
        if r as u32 == absent {
            assert!(e.is_none());
            continue;
        }
        // Every present rank reports its own timeout naming the absent rank, whichever rank
        // gave up first (before the rule in the device's `Call::spin`, the ranks told of the
        // first one's timeout reported `PeerFaulted`).
        match e {
            Some(Err(Error::Timeout {
                collective,
                rank,
                peer,
                peer_missing,
                ..
            })) => {
                assert_eq!(
                    (*collective, *rank, *peer, *peer_missing),
                    ("all_gather", r as u32, absent, true)
                );
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

// ---------------------------------------------------------------- p2p windows

#[test]
fn p2p_ring_on_host_memory() {
    for world in [2u32, 3, 4] {
        let sizes: [u64; 7] = [0, 1, 15, 16, 17, 4095, (1 << 20) + 13];
        run_in_process(world, |b| {
            let ws = Workspace::new(&b, HostAllocator::new(), SMALL)?;
            let ctx = Context::new_host(b.rank(), world, ws)?;
            let window = Window::new(&ctx, 2 << 20)?;
            let (me, next, prev) = (
                b.rank(),
                (b.rank() + 1) % world,
                (b.rank() + world - 1) % world,
            );
            for (i, &bytes) in sizes.iter().enumerate() {
                let data: Vec<u8> = (0..bytes)
                    .map(|j| (j as u32 * 13 + me * 7 + i as u32) as u8)
                    .collect();
                let data = aligned(&data);
                let offset = 16 * i as u64;
                // SAFETY: host memory alive for the (synchronous) put.
                unsafe { window.put(&ctx, next, offset, Span::new(data.addr(), bytes))? };
                window.signal(&ctx, next, i as u64 + 1)?;
                window.wait(&ctx, prev, i as u64 + 1, Duration::from_secs(20))?;
                let mut got = vec![0u8; bytes as usize];
                window.read_local(&ctx, offset, &mut got)?;
                let expect: Vec<u8> = (0..bytes)
                    .map(|j| (j as u32 * 13 + prev * 7 + i as u32) as u8)
                    .collect();
                assert_eq!(got, expect, "world {world}, {bytes} B");
                // Nobody overwrites a window before its owner has read it.
                b.barrier()?;
            }
            window.finalize()?;
            ctx.finalize()
        })
        .unwrap();
    }
}

#[test]
fn p2p_bad_input_copies_nothing() {
    run_in_process(2, |b| {
        let ws = Workspace::new(&b, HostAllocator::new(), SMALL)?;
        let ctx = Context::new_host(b.rank(), 2, ws)?;
        let window = Window::new(&ctx, 4096)?;
        if b.rank() == 0 {
            let data = aligned(&[0xabu8; 4096]);
            let src = Span::new(data.addr(), 4096);
            let bad = [
                (2, 0, src),                            // peer outside the world
                (1, 16, src),                           // past the end of the window
                (1, 8, Span::new(data.addr(), 64)),     // misaligned destination
                (1, 0, Span::new(data.addr() + 4, 64)), // misaligned source
                (1, 0, Span::new(0, 64)),               // null source
            ];
            for (peer, offset, src) in bad {
                // SAFETY: every call is refused before copying.
                assert!(unsafe { window.put(&ctx, peer, offset, src) }.is_err());
            }
            assert!(window.signal(&ctx, 2, 1).is_err());
            assert!(matches!(
                window.wait(&ctx, 1, 1, Duration::from_millis(1)),
                Err(Error::Timeout {
                    collective: "p2p wait",
                    rank: 0,
                    peer: 1,
                    epoch: 1,
                    ..
                })
            ));
        }
        b.barrier()?;
        if b.rank() == 1 {
            let mut got = vec![1u8; 4096];
            window.read_local(&ctx, 0, &mut got)?;
            assert!(got.iter().all(|&x| x == 0), "a refused put wrote data");
            assert_eq!(window.signal_value(&ctx, 0)?, 0);
        }
        window.finalize()?;
        ctx.finalize()
    })
    .unwrap();
}

/// A 16-byte aligned copy of some bytes.
struct Aligned(Vec<u128>, usize);

fn aligned(bytes: &[u8]) -> Aligned {
    let mut v = vec![0u128; bytes.len().div_ceil(16).max(1)];
    // SAFETY: the Vec holds at least `bytes.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast(), bytes.len()) };
    Aligned(v, bytes.len())
}

impl Aligned {
    fn addr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: `self.1 <= 16 * self.0.len()` initialised bytes.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.1) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.1) }
    }
}

// ---------------------------------------------------------------- sizes, overlap, agreement

fn single_host_context() -> Context {
    let b = InProcess::group(1).unwrap().remove(0);
    Context::new_host(
        0,
        1,
        Workspace::new(&b, HostAllocator::new(), SMALL).unwrap(),
    )
    .unwrap()
}

/// `count × element size × parts` that overflows 64 bits is an invalid argument before any
/// launch (it used to wrap, or panic in a debug build).
#[test]
fn sizes_that_overflow_are_invalid_arguments() {
    use purlin::collective::{Options, all_gather_raw, all_to_all_raw, reduce_scatter_raw};
    run_in_process(2, |b| {
        let ws = Workspace::new(&b, HostAllocator::new(), SMALL)?;
        let ctx = Context::new_host(b.rank(), 2, ws)?;
        let span = Span::new(0x1000, u64::MAX);
        // The elements fit 64 bits; two parts of them do not.
        let count = u64::MAX / 4 + 1;
        let o = Options::default();
        // SAFETY (each call): refused before anything runs.
        unsafe {
            let r = all_gather_raw(&ctx, purlin::DataType::Bf16, span, span, count, &o);
            assert!(
                matches!(r, Err(Error::InvalidArgument { what: "dst", .. })),
                "{r:?}"
            );
            let r = all_to_all_raw(&ctx, purlin::DataType::Bf16, span, span, count, &o);
            assert!(
                matches!(r, Err(Error::InvalidArgument { what: "src", .. })),
                "{r:?}"
            );
            let r = reduce_scatter_raw(
                &ctx,
                purlin::DataType::Bf16,
                purlin::ReduceOpKind::Sum,
                span,
                span,
                count,
                &o,
            );
            assert!(
                matches!(r, Err(Error::InvalidArgument { what: "src", .. })),
                "{r:?}"
            );
        }
        ctx.finalize()
    })
    .unwrap();
}

/// Input and output that overlap other than the in-place forms allow are refused on the host.
#[test]
fn overlapping_buffers_are_refused_where_the_collective_does_not_allow_them() {
    use purlin::DataType::F32;
    use purlin::collective::{Options, all_gather_raw, all_reduce_raw, all_to_all_raw};
    let ctx = single_host_context();
    let o = Options::default();
    let buf = Span::new(0x10000, 4096);
    let shifted = Span::new(0x10000 + 64, 4096);
    // SAFETY (each call): refused before anything runs, or on the host context after the
    // checks (Unsupported).
    unsafe {
        assert!(matches!(
            all_to_all_raw(&ctx, F32, buf, buf, 16, &o),
            Err(Error::InvalidArgument { what: "dst", .. })
        ));
        assert!(matches!(
            all_reduce_raw(&ctx, F32, purlin::ReduceOpKind::Sum, shifted, buf, 64, &o),
            Err(Error::InvalidArgument { what: "dst", .. })
        ));
        // In place (world 1: rank 0's part is at 0) and the same buffer for AllReduce pass the
        // checks and meet the host context's refusal.
        assert!(matches!(
            all_gather_raw(&ctx, F32, buf, buf, 64, &o),
            Err(Error::Unsupported(_))
        ));
        assert!(matches!(
            all_reduce_raw(&ctx, F32, purlin::ReduceOpKind::Sum, buf, buf, 64, &o),
            Err(Error::Unsupported(_))
        ));
    }
    ctx.finalize().unwrap();
}

/// `launch_raw` takes any collective at run time: an operator for a copy, none for a
/// reduction, or a count where counts belong (and the reverse) are refused before anything
/// runs; a well-formed call passes the same checks as the collective's own `*_raw` function.
#[test]
fn launch_raw_refuses_operators_and_sizes_its_collective_does_not_take() {
    use purlin::collective::{CollectiveKind, Counts, Options, RawCall, Size, launch_raw};
    let ctx = single_host_context();
    let o = Options::default();
    let buf = Span::new(0x10000, 4096);
    let other = Span::new(0x20000, 4096);
    let counts = Counts {
        addr: 0x30000,
        max_count: 16,
    };
    for kind in CollectiveKind::ALL {
        let call = |op, size| RawCall {
            kind,
            dtype: purlin::DataType::F32,
            op,
            dst: other,
            src: buf,
            size,
        };
        let right_op = kind.reduces().then_some(purlin::ReduceOpKind::Sum);
        let wrong_op = if kind.reduces() {
            None
        } else {
            Some(purlin::ReduceOpKind::Max)
        };
        let (right_size, wrong_size) = if kind.is_v() {
            (Size::Counts(counts), Size::Count(16))
        } else {
            (Size::Count(16), Size::Counts(counts))
        };
        // SAFETY (each call): refused before anything runs, or on the host context after the
        // checks (Unsupported).
        unsafe {
            let r = launch_raw(&ctx, &call(wrong_op, right_size), &o);
            assert!(
                matches!(r, Err(Error::InvalidArgument { what: "op", .. })),
                "{kind:?}: {r:?}"
            );
            let r = launch_raw(&ctx, &call(right_op, wrong_size), &o);
            assert!(
                matches!(r, Err(Error::InvalidArgument { what: "size", .. })),
                "{kind:?}: {r:?}"
            );
            let r = launch_raw(&ctx, &call(right_op, right_size), &o);
            assert!(matches!(r, Err(Error::Unsupported(_))), "{kind:?}: {r:?}");
            // A source too small for what the call reads (fixed-size forms: checked here).
            if !kind.is_v() {
                let tiny = RawCall {
                    src: Span::new(0x10000, 16),
                    ..call(right_op, Size::Count(64))
                };
                let r = launch_raw(&ctx, &tiny, &o);
                assert!(
                    matches!(r, Err(Error::BufferTooSmall { what: "src", .. })),
                    "{kind:?}: {r:?}"
                );
            }
        }
    }
    ctx.finalize().unwrap();
}

/// Requirements that differ field by field are refused even when their total bytes agree (the
/// ranks would address each other's staging differently).
#[test]
fn requirements_with_equal_totals_but_different_fields_are_refused() {
    let world = 2u32;
    let a = WorkspaceRequirements {
        staging_half_bytes: 1 << 20,
        latency_window_bytes: 64 << 10,
    };
    // 2 × half + 2 × world × window is the same.
    let b = WorkspaceRequirements {
        staging_half_bytes: (1 << 20) - (128 << 10),
        latency_window_bytes: 128 << 10,
    };
    assert_eq!(a.slab_bytes(world).unwrap(), b.slab_bytes(world).unwrap());
    let alloc = Arc::new(Counting::default());
    let errors = run_in_process(world, |boot| {
        let req = if boot.rank() == 0 { a } else { b };
        Ok(Workspace::with_shared(Arc::new(boot.clone()), alloc.clone(), req).err())
    })
    .unwrap();
    for e in &errors {
        assert!(
            matches!(
                e,
                Some(Error::InvalidArgument {
                    what: "staging_half_bytes",
                    ..
                })
            ),
            "{e:?}"
        );
    }
    alloc.assert_nothing_live();
}

/// A wait bound is always bounded: `Duration::MAX` is clamped.
#[test]
fn timeouts_are_clamped_to_a_bound() {
    let mut ctx = single_host_context();
    ctx.set_timeout(Duration::MAX);
    assert_eq!(
        ctx.device_view().timeout_ns,
        purlin::context::MAX_TIMEOUT.as_nanos() as u64
    );
    ctx.set_timeout(Duration::ZERO);
    assert_eq!(ctx.device_view().timeout_ns, 1_000_000);
    ctx.finalize().unwrap();
}

/// A window wait's timeout record (what `purlin_window_wait` leaves on a GPU) is read by
/// `check_fault` as a p2p-wait timeout naming the peer and the awaited value, and poisons the
/// context; a collective's record, if there is one, comes first.
#[test]
fn a_window_wait_record_is_a_p2p_timeout_that_poisons() {
    let b = InProcess::group(1).unwrap().remove(0);
    let ctx = Context::new_host(
        0,
        1,
        Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small()).unwrap(),
    )
    .unwrap();
    assert!(ctx.check_fault().is_ok());
    let record = (ctx.device_view().state + LocalState::WINDOW_FAULT as u64) as *mut u32;
    // SAFETY: the record lies in this context's host-memory local state, which nothing else
    // touches (no call is running).
    unsafe {
        record.write_volatile(1);
        record.add(1).write_volatile(3);
        (record.add(2) as *mut u64).write_volatile(42);
        (record.add(4) as *mut u64).write_volatile(41);
    }
    match ctx.check_fault() {
        Err(Error::Timeout {
            collective: "p2p wait",
            rank: 0,
            peer: 3,
            epoch: 42,
            peer_missing: false,
            ..
        }) => {}
        other => panic!("expected a p2p-wait timeout, got {other:?}"),
    }
    assert!(matches!(ctx.ensure_usable(), Err(Error::Poisoned { .. })));
}
