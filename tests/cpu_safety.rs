//! What the collectives refuse on the device, and how a fault spreads, on the CPU emulation:
//! V counts past the buffers or `max_count` or overflowing (refused before any byte moves,
//! bytes past the declared capacity untouched), input and output overlapping other than the
//! in-place forms allow, ranks whose calls differ (a digest fault naming both ranks and the
//! field, long before the timeout), and a rank that refuses or faults stopping its peers at
//! once (their error names it and why).

use purlin_device::atom::Host;
use purlin_device::collective;
use purlin_device::collective::{CollectiveKind, Fault};
use purlin_device::element::DataType;
use purlin_device::emulation::{Buffer, Communicator, EmulationError, Launch, Queued, Schedule};
use purlin_device::op::ReduceOpKind;
use purlin_device::snac::{DigestField, FaultKind, Refusal, Runtime, SnacArgs};
use std::time::{Duration, Instant};

/// A communicator whose waits would give up only after 10 s: every fault below must come long
/// before that.
fn communicator(world: u32) -> Communicator {
    Communicator::builder(world)
        .staging_half_bytes(4096)
        .latency_window_bytes(2048)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Well under the 10 s timeout: the fault came from a check or an abort record, not a wait
/// running out.
const PROMPT: Duration = Duration::from_secs(3);

fn faults_of(e: EmulationError) -> Vec<Fault> {
    match e {
        EmulationError::Faults(f) => f,
        EmulationError::QueuedFaults(f) => f.into_iter().map(|(_, f)| f).collect(),
        other => panic!("expected faults, got {other}"),
    }
}

/// Runs `kind` (a V collective) with `counts` on every rank and `dst` capacities `dst_bytes[r]`
/// (the buffers are `GUARD` bytes larger, poisoned), by calling the device entry point as a
/// fused kernel would; returns the faults and every rank's output buffer.
fn v_call(
    world: u32,
    kind: CollectiveKind,
    counts: &[u64],
    src_bytes: u64,
    dst_bytes: &[u64],
    max_count: u64,
) -> (Result<(), EmulationError>, Vec<Vec<u8>>, Duration) {
    const GUARD: usize = 64;
    let comm = communicator(world);
    let w = world as usize;
    let src: Vec<Buffer> = (0..w)
        .map(|_| Buffer::zeroed(src_bytes as usize + GUARD))
        .collect();
    let dst: Vec<Buffer> = (0..w)
        .map(|r| {
            let b = Buffer::zeroed(dst_bytes[r] as usize + GUARD);
            b.fill(0xa5);
            b
        })
        .collect();
    let counts: Vec<Buffer> = (0..w).map(|_| Buffer::from_slice(counts)).collect();
    let started = Instant::now();
    let ran = comm.launch(2, None, |rank, block, ctx, smem| {
        let r = rank as usize;
        let mut args = SnacArgs::new(dst[r].as_mut_ptr(), src[r].as_ptr(), 0, 2).bounded(
            src_bytes,
            dst_bytes[r],
            max_count,
        );
        (args.block, args.smem) = (block, smem);
        args.counts = counts[r].as_ptr() as *const u64;
        args.elem_bytes = 4;
        // SAFETY: the counts buffer holds what the kind reads; the capacities passed are at
        // most the buffers' sizes, and the collective checks the counts against them.
        unsafe {
            match kind {
                CollectiveKind::AllGatherV => {
                    collective::all_gather_v::<Host, Runtime>(&args, &ctx)
                }
                CollectiveKind::AllToAllV => collective::all_to_all_v::<Host, Runtime>(&args, &ctx),
                _ => collective::reduce_scatter_v_op::<Host, Runtime, f32>(
                    &args,
                    &ctx,
                    ReduceOpKind::Sum,
                ),
            }
        }
    });
    let elapsed = started.elapsed();
    (ran, dst.iter().map(Buffer::bytes).collect(), elapsed)
}

/// Counts that need more than the output holds are refused on the rank whose output is too
/// small, before anything is written; its peers stop at once, naming it.
#[test]
fn v_counts_past_the_output_are_refused_and_write_nothing() {
    for kind in [
        CollectiveKind::AllGatherV,
        CollectiveKind::ReduceScatterV,
        CollectiveKind::AllToAllV,
    ] {
        let world = 3u32;
        let n = if kind == CollectiveKind::AllToAllV {
            6
        } else {
            3
        };
        let counts = vec![100u64; n];
        // Every rank's output holds what the counts need, but rank 1's, which holds 16 bytes.
        let needed = match kind {
            CollectiveKind::AllGatherV => 300 * 4,
            CollectiveKind::ReduceScatterV => 100 * 4,
            _ => 300 * 4,
        };
        let src = 300 * 4;
        let (ran, outputs, elapsed) =
            v_call(world, kind, &counts, src, &[needed, 16, needed], 1000);
        let faults = faults_of(ran.expect_err("rank 1's output is too small"));
        assert!(elapsed < PROMPT, "{kind:?}: took {elapsed:?}");
        let refused: Vec<&Fault> = faults
            .iter()
            .filter(|f| f.kind == FaultKind::InvalidArgument)
            .collect();
        assert_eq!(refused.len(), 1, "{kind:?}: {faults:?}");
        assert_eq!(
            (refused[0].rank, refused[0].refusal()),
            (1, Refusal::DestinationTooSmall),
            "{kind:?}"
        );
        assert_eq!((refused[0].awaited, refused[0].observed), (16, needed));
        for f in faults.iter().filter(|f| f.rank != 1) {
            assert_eq!(f.kind, FaultKind::PeerFaulted, "{kind:?}: {f}");
            assert_eq!(f.peer, 1, "{kind:?}: {f}");
            assert!(f.to_string().contains("refused the call"), "{f}");
        }
        // Nothing was written to the refusing rank's output, guard bytes included.
        assert!(
            outputs[1].iter().all(|&b| b == 0xa5),
            "{kind:?}: rank 1 written"
        );
    }
}

/// A count above `max_count`, an input too small for the counts, and counts whose sum
/// overflows are each refused with their reason and the offending count.
#[test]
fn v_counts_above_max_or_past_the_input_or_overflowing_are_refused() {
    let world = 2u32;
    // A count above max_count (index 1).
    let (ran, out, _) = v_call(world, CollectiveKind::AllGatherV, &[4, 9], 64, &[64, 64], 8);
    let faults = faults_of(ran.unwrap_err());
    let f = faults
        .iter()
        .find(|f| f.kind == FaultKind::InvalidArgument)
        .unwrap();
    assert_eq!(
        (f.refusal(), f.refused_index(), f.observed, f.awaited),
        (Refusal::CountAboveMax, 1, 9, 8)
    );
    assert!(out.iter().all(|o| o.iter().all(|&b| b == 0xa5)));
    // The input holds 16 bytes; rank r's part needs counts[r] × 4.
    let (ran, _, _) = v_call(world, CollectiveKind::AllGatherV, &[8, 8], 16, &[64, 64], 8);
    let faults = faults_of(ran.unwrap_err());
    assert_eq!(faults.len(), 2);
    assert!(faults
        .iter()
        .all(|f| f.kind == FaultKind::InvalidArgument && f.refusal() == Refusal::SourceTooSmall));
    // Counts whose sum wraps 64 bits.
    let huge = u64::MAX / 2 + 1;
    let (ran, out, _) = v_call(
        world,
        CollectiveKind::ReduceScatterV,
        &[huge, huge],
        64,
        &[64, 64],
        u64::MAX,
    );
    let faults = faults_of(ran.unwrap_err());
    assert!(
        faults
            .iter()
            .all(|f| f.kind == FaultKind::InvalidArgument && f.refusal() == Refusal::SizeOverflow),
        "{faults:?}"
    );
    assert!(out.iter().all(|o| o.iter().all(|&b| b == 0xa5)));
}

/// AllToAllV counts in which a rank sends itself a different number of elements than it
/// receives from itself are refused on that rank before any byte moves: no peer compares that
/// pair, and copying what it sends into the room for what it receives ran past the output
/// (here rank 1 sends itself 12 elements into room for 4 at the end of its output).
#[test]
fn all_to_all_v_counts_a_rank_sends_itself_must_match_what_it_receives() {
    // The same counts on both ranks: sent [4, 12], received [12, 4]. The pairs between the
    // ranks agree (rank 1 sends rank 0 four, rank 0 expects four), the self pairs do not.
    let (ran, out, elapsed) = v_call(
        2,
        CollectiveKind::AllToAllV,
        &[4, 12, 12, 4],
        64,
        &[64, 64],
        16,
    );
    let faults = faults_of(ran.expect_err("self counts that differ must be refused"));
    assert!(elapsed < PROMPT, "took {elapsed:?}");
    let refused: Vec<&Fault> = faults
        .iter()
        .filter(|f| f.kind == FaultKind::InvalidArgument)
        .collect();
    assert_eq!(refused.len(), 2, "{faults:?}");
    for f in refused {
        assert_eq!(f.refusal(), Refusal::SelfCounts, "{f}");
        let (sent, received) = if f.rank == 0 { (4, 12) } else { (12, 4) };
        assert_eq!((f.observed, f.awaited), (sent, received), "{f}");
        assert!(f.to_string().contains("itself"), "{f}");
    }
    assert!(
        out.iter().all(|o| o.iter().all(|&b| b == 0xa5)),
        "an output was written"
    );
}

/// AllToAll with its input as its output, and AllGather with an input that overlaps the output
/// but is not this rank's part, are refused; in-place AllGather runs.
#[test]
fn overlap_other_than_in_place_is_refused() {
    let comm = communicator(2);
    let bufs: Vec<Buffer> = (0..2).map(|_| Buffer::zeroed(256)).collect();
    let run = |kind: CollectiveKind, src_at: usize| {
        comm.launch(1, None, |rank, block, ctx, smem| {
            let b = &bufs[rank as usize];
            // SAFETY: inside the 256-byte buffer.
            let src = unsafe { b.as_ptr().add(src_at) };
            let mut args = SnacArgs::new(b.as_mut_ptr(), src, 64, 1).bounded(64, 256, 0);
            if kind == CollectiveKind::AllToAll {
                args = SnacArgs::new(b.as_mut_ptr(), src, 64, 1).bounded(128, 128, 0);
            }
            (args.block, args.smem) = (block, smem);
            // SAFETY: both ranges lie in the buffer; the collective checks how they overlap.
            unsafe {
                match kind {
                    CollectiveKind::AllToAll => {
                        collective::all_to_all::<Host, Runtime>(&args, &ctx)
                    }
                    _ => collective::all_gather::<Host, Runtime>(&args, &ctx),
                }
            }
        })
    };
    // Every rank refuses (each one's buffers overlap), with that reason.
    let refused = |r: Result<(), EmulationError>| {
        let faults = faults_of(r.expect_err("an overlap must be refused"));
        faults.len() == 2
            && faults
                .iter()
                .all(|f| f.kind == FaultKind::InvalidArgument && f.refusal() == Refusal::Overlap)
    };
    assert!(refused(run(CollectiveKind::AllToAll, 0)));
    // Rank r's input at byte 32 of the output overlaps part 0 or 1 without being it.
    assert!(refused(run(CollectiveKind::AllGather, 32)));
    // In place: rank r's input is part r of its output (a fresh communicator: a fault leaves
    // the old one poisoned).
    let comm = communicator(2);
    let in_place = comm.launch(1, None, |rank, block, ctx, smem| {
        let b = &bufs[rank as usize];
        // SAFETY: part `rank` of the 128 bytes the gather writes.
        let src = unsafe { b.as_ptr().add(64 * rank as usize) };
        let mut args = SnacArgs::new(b.as_mut_ptr(), src, 64, 1).bounded(64, 256, 0);
        (args.block, args.smem) = (block, smem);
        // SAFETY: as above.
        unsafe { collective::all_gather::<Host, Runtime>(&args, &ctx) };
    });
    assert!(in_place.is_ok(), "{in_place:?}");
}

/// Runs rank `r`'s call `launches[r]` on every rank (the ranks disagree) and returns the
/// faults and how long it took.
fn disagreeing(world: u32, launches: &[Launch]) -> (Vec<(usize, Fault)>, Duration) {
    let comm = communicator(world);
    let big = 4096 * world as usize;
    let src: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(big)).collect();
    let dst: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(big)).collect();
    let counts: Vec<Buffer> = (0..world)
        .map(|r| {
            // AllToAllV: every rank sends 8 elements to each, but rank 0 expects 9 from rank 1.
            let mut c = vec![8u64; 2 * world as usize];
            if r == 0 {
                c[world as usize + 1] = 9;
            }
            Buffer::from_slice(&c)
        })
        .collect();
    let queues: Vec<Vec<Queued>> = (0..world as usize)
        .map(|r| {
            vec![Queued {
                launch: launches[r],
                src: &src[r],
                dst: &dst[r],
                counts: Some(&counts[r]),
            }]
        })
        .collect();
    let started = Instant::now();
    let err = comm
        .run_queued(&queues, &Schedule::default())
        .expect_err("the ranks' calls differ");
    let elapsed = started.elapsed();
    match err {
        EmulationError::QueuedFaults(f) => (f, elapsed),
        other => panic!("{other}"),
    }
}

/// Two ranks that make different calls fault at once, naming each other and what differs.
#[test]
fn ranks_whose_calls_differ_name_each_other_and_the_field() {
    ranks_whose_calls_differ(1);
}

/// As above with 64-thread blocks: the packet paths then check the digests early, in block 0's
/// last warp between sending and receiving (the first warp holds the data).
#[test]
fn ranks_whose_calls_differ_are_named_by_the_early_digest_check() {
    ranks_whose_calls_differ(64);
}

fn ranks_whose_calls_differ(threads: u32) {
    let base = Launch {
        threads,
        ..Launch::new(CollectiveKind::AllReduce, 256).typed(DataType::F32, ReduceOpKind::Sum)
    };
    let cases: Vec<(DigestField, Launch)> = vec![
        (DigestField::Size, Launch { bytes: 512, ..base }),
        (
            DigestField::Operator,
            base.typed(DataType::F32, ReduceOpKind::Max),
        ),
        (
            DigestField::Element,
            base.typed(DataType::Bf16, ReduceOpKind::Sum),
        ),
        (DigestField::Blocks, Launch { blocks: 3, ..base }),
        (
            DigestField::Collective,
            Launch {
                collective: CollectiveKind::AllGather,
                ..base
            },
        ),
        (
            DigestField::Plan,
            Launch {
                plan: purlin_device::snac::Plan {
                    chunk_bytes: 64,
                    ..base.plan
                },
                ..base
            },
        ),
    ];
    for (field, other) in cases {
        let (faults, elapsed) = disagreeing(2, &[base, other]);
        assert!(elapsed < PROMPT, "{field:?}: took {elapsed:?}");
        let named = faults
            .iter()
            .find(|(_, f)| f.kind == FaultKind::DigestMismatch)
            .unwrap_or_else(|| panic!("{field:?}: {faults:?}"));
        assert_eq!(named.1.field(), field, "{}", named.1);
        assert_eq!(named.1.peer, 1 - named.1.rank);
        assert!(named.1.to_string().contains(field.name()), "{}", named.1);
    }
}

/// AllToAllV: what rank 1 sends rank 0 differs from what rank 0 expects from it. Unbounded
/// counts (staged), and the tight bound (the packet path, where rank 0 would otherwise wait
/// for a unit rank 1 never sends), with one-thread blocks and with the early digest check.
#[test]
fn all_to_all_v_counts_that_do_not_pair_up_are_named() {
    for (max_count, threads) in [(u64::MAX, 1), (9, 1), (9, 64)] {
        let mut l = Launch::new(CollectiveKind::AllToAllV, 0);
        (l.elem_bytes, l.max_count, l.threads) = (4, max_count, threads);
        let (faults, elapsed) = disagreeing(2, &[l, l]);
        assert!(elapsed < PROMPT, "{max_count} {threads}: took {elapsed:?}");
        let f = faults
            .iter()
            .map(|(_, f)| f)
            .find(|f| f.kind == FaultKind::DigestMismatch)
            .unwrap_or_else(|| panic!("{max_count} {threads}: {faults:?}"));
        assert_eq!((f.rank, f.peer, f.field()), (0, 1, DigestField::Counts));
        assert_eq!((f.awaited, f.observed), (9, 8));
    }
}

/// A rank that times out (its peer never launched the call) stops every other rank at once:
/// they fault through its abort record, naming it, long before their own waits would run out.
#[test]
fn a_faulting_rank_stops_its_peers_at_once() {
    let world = 4u32;
    let comm = Communicator::builder(world)
        .staging_half_bytes(4096)
        .latency_window_bytes(2048)
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let src: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(1024)).collect();
    let dst: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(4096)).collect();
    let mut l = Launch::new(CollectiveKind::AllGather, 1024);
    l.absent = Some(3);
    let started = Instant::now();
    let faults = faults_of(comm.run(&l, &src, &dst, None).unwrap_err());
    let elapsed = started.elapsed();
    // One timeout (500 ms) and the rest at once: well under three timeouts.
    assert!(elapsed < Duration::from_millis(1400), "took {elapsed:?}");
    let timeouts = faults
        .iter()
        .filter(|f| f.kind == FaultKind::Timeout)
        .count();
    assert!(timeouts >= 1, "{faults:?}");
    for f in &faults {
        let missing = match f.kind {
            FaultKind::Timeout => f.peer,
            FaultKind::PeerFaulted => f.first().unwrap().peer,
            _ => panic!("{f}"),
        };
        assert_eq!(missing, 3, "{f}");
    }
}

/// The register datapath (Host's) under another layout: laid out for `THREADS` threads per
/// block and asking for `SMEM` bytes of shared memory it never touches. Two threads are enough
/// to see a larger block refused; 4 KiB that a lean launch does not give, to see the paths that
/// need them refused.
#[derive(Clone, Copy, Debug)]
struct Layout<const THREADS: u32, const SMEM: u32>;

/// Laid out for two threads per block, no shared memory.
type TwoThreads = Layout<2, 0>;

/// Host's block size, 4 KiB of shared memory.
type WithSmem = Layout<{ <Host as purlin_device::atom::Atom>::THREADS }, 4096>;

impl<const THREADS: u32, const SMEM: u32> purlin_device::atom::Atom for Layout<THREADS, SMEM> {
    const NAME: &'static str = "test-layout";
    const THREADS: u32 = THREADS;
    const SMEM_BYTES: u32 = SMEM;

    unsafe fn copy(
        coop: purlin_device::coop::Coop,
        dst: *mut u8,
        src: *const u8,
        bytes: usize,
        smem: *mut u8,
    ) {
        // SAFETY: forwarded contract.
        unsafe { <Host as purlin_device::atom::Atom>::copy(coop, dst, src, bytes, smem) }
    }

    unsafe fn reduce<T: purlin_device::element::Element, O: purlin_device::op::ReduceOp>(
        coop: purlin_device::coop::Coop,
        dst: *mut T,
        srcs: &[*const T],
        count: usize,
        smem: *mut u8,
    ) {
        // SAFETY: forwarded contract.
        unsafe { <Host as purlin_device::atom::Atom>::reduce::<T, O>(coop, dst, srcs, count, smem) }
    }
}

/// A block with more threads than its Atom is laid out for (a fused kernel launched with the
/// wrong block size) is refused before the Atom could run past its shared memory; the Atom's
/// own block size runs.
#[test]
fn blocks_larger_than_the_atom_supports_are_refused() {
    let src: Vec<Buffer> = (0..2).map(|_| Buffer::zeroed(64)).collect();
    let dst: Vec<Buffer> = (0..2).map(|_| Buffer::zeroed(128)).collect();
    let run = |threads: u32| {
        let comm = communicator(2);
        comm.launch_threads(1, threads, None, |rank, block, ctx, smem| {
            let r = rank as usize;
            let mut args =
                SnacArgs::new(dst[r].as_mut_ptr(), src[r].as_ptr(), 64, 1).bounded(64, 128, 0);
            (args.block, args.smem) = (block, smem);
            // SAFETY: the buffers hold 64 and 128 bytes, as the capacities say.
            unsafe { collective::all_gather::<TwoThreads, Runtime>(&args, &ctx) };
        })
    };
    let faults = faults_of(run(4).expect_err("four threads on a two-thread Atom"));
    assert_eq!(faults.len(), 2);
    for f in &faults {
        assert_eq!(
            (f.kind, f.refusal(), f.observed),
            (FaultKind::InvalidArgument, Refusal::BlockThreads, 4),
            "{f}"
        );
    }
    assert!(run(2).is_ok());
}

/// A call launched *lean* (SNAC's scratch only, as the host launches the latency paths) runs
/// when its path needs no Atom shared memory, and is refused — never run over memory it was
/// not given — when it does; less than SNAC's scratch is refused too.
#[test]
fn lean_launches_run_the_latency_paths_and_refuse_the_others() {
    use purlin_device::snac::{Plan, SNAC_SMEM_BYTES};
    let window = 2048; // the communicator's latency window
    for kind in [
        CollectiveKind::AllGather,
        CollectiveKind::AllToAll,
        CollectiveKind::ReduceScatter,
    ] {
        // 64 bytes per part fit the window; 4096 need staging.
        for (bytes, smem_bytes) in [(64u64, SNAC_SMEM_BYTES), (4096, SNAC_SMEM_BYTES), (64, 64)] {
            let path_is_lean = collective::lean(kind, 2, bytes, &Plan::DEFAULT, window);
            assert_eq!(path_is_lean, bytes == 64, "{kind:?} {bytes}");
            let comm = communicator(2);
            let all = 2 * bytes as usize;
            let src: Vec<Buffer> = (0..2u8)
                .map(|r| Buffer::from_slice(&vec![r + 1; all]))
                .collect();
            let dst: Vec<Buffer> = (0..2).map(|_| Buffer::zeroed(all)).collect();
            let ran = comm.launch(2, None, |rank, block, ctx, smem| {
                let r = rank as usize;
                let mut args = SnacArgs::new(dst[r].as_mut_ptr(), src[r].as_ptr(), bytes, 2)
                    .bounded(all as u64, all as u64, 0);
                (args.block, args.smem, args.smem_bytes) = (block, smem, smem_bytes);
                // SAFETY: both buffers hold two parts; every rank makes the same call. The
                // emulated block has SNAC's scratch only (WithSmem's 4 KiB are never given):
                // every path that would need them must be refused before touching the scratch.
                unsafe {
                    match kind {
                        CollectiveKind::AllGather => {
                            collective::all_gather::<WithSmem, Runtime>(&args, &ctx)
                        }
                        CollectiveKind::AllToAll => {
                            collective::all_to_all::<WithSmem, Runtime>(&args, &ctx)
                        }
                        _ => collective::reduce_scatter::<
                            WithSmem,
                            Runtime,
                            f32,
                            purlin_device::op::Max,
                        >(&args, &ctx),
                    }
                }
            });
            if smem_bytes >= SNAC_SMEM_BYTES && path_is_lean {
                assert!(ran.is_ok(), "{kind:?} {bytes}: {ran:?}");
                let out = dst[1].bytes();
                let want: Vec<u8> = match kind {
                    // Part p of every output comes from rank p (AllToAll: part 1 of rank p's).
                    CollectiveKind::AllGather | CollectiveKind::AllToAll => {
                        (0..all).map(|i| (i / bytes as usize) as u8 + 1).collect()
                    }
                    // max(1, 2) over rank 1's part.
                    _ => [vec![2u8; bytes as usize], vec![0; bytes as usize]].concat(),
                };
                assert_eq!(out, want, "{kind:?} {bytes}");
            } else {
                let faults = faults_of(ran.expect_err("a lean launch of a staged call is refused"));
                assert!(
                    faults.iter().any(|f| f.kind == FaultKind::InvalidArgument
                        && f.refusal() == Refusal::SharedMemory),
                    "{kind:?} {bytes} {smem_bytes}: {faults:?}"
                );
            }
        }
    }
}

/// Workspace sizes the machine cannot hold, or whose sum passes 64 bits, are an error from
/// `build`, not an abort or a wrapped size (before this test: `2 × u64::MAX` overflowed, and a
/// 2^40-byte staging half aborted the process when its allocation failed).
#[test]
fn workspaces_too_large_to_allocate_are_an_error() {
    for (half, window) in [(u64::MAX, 2048), (4096, u64::MAX / 3), (1 << 62, 1 << 61)] {
        let built = Communicator::builder(3)
            .staging_half_bytes(half)
            .latency_window_bytes(window)
            .build();
        assert!(
            matches!(built, Err(EmulationError::Memory(_))),
            "half {half}, window {window}: {built:?}"
        );
    }
    // Past what any machine maps (2^62 bytes a rank, beyond every 64-bit CPU's virtual address
    // space), though the size itself fits.
    let built = Communicator::builder(2).staging_half_bytes(1 << 61).build();
    assert!(matches!(built, Err(EmulationError::Memory(_))), "{built:?}");
    assert!(matches!(
        Buffer::try_zeroed(usize::MAX - 8),
        Err(EmulationError::Memory(_))
    ));
    // A rank outside the world has no fault to report.
    assert_eq!(communicator(2).fault(2), None);
}
