//! The one-pass regime on the CPU emulation. With every rank's buffers in every rank's
//! tables (symmetric buffers), or with ordinary buffers every peer reaches (ranks of one
//! process: the calls exchange their addresses at entry), AllReduce, AllGather(V) (pushing
//! onto symmetric outputs, pulling onto ordinary ones), ReduceScatter(V) and AllToAll run one
//! pass over the peers' buffers (no staging); when one rank's buffers are out of the peers'
//! reach every rank stages the call; AllToAllV runs its pass only over the exchanged
//! addresses (each rank announces where its part for each peer starts). Every call draws its kind of buffers. Every world from 1 to 16, every element
//! type and operator of the reductions, sizes from 0 to several of the regime's pieces, 1 to 3
//! blocks of 1 or 64 threads, in place where the collective allows it; reductions bit-exact
//! with the f32 rank-order reference and within the f64 tolerance. Then what must fail: a rank
//! whose buffers are ordinary while its peers' are symmetric (a digest fault naming the
//! buffers, no hang), and a table that does not name the rank's own buffer (refused before
//! anything moves).
//!
//! Outputs are poisoned, inputs fresh random values (seed printed; `PURLIN_TEST_SEED` replays).

use purlin_device::atom::Host;
use purlin_device::collective;
use purlin_device::collective::{CollectiveKind, Fault};
use purlin_device::element::DataType;
use purlin_device::emulation::{Buffer, Communicator, EmulationError, Launch};
use purlin_device::op::ReduceOpKind;
use purlin_device::snac::{DigestField, FaultKind, PeersReach, Plan, Refusal, Runtime, SnacArgs};
use purlin_tests::{Buffers, POISON, count_wrong_f64, fresh_rng, random_elements, reference_f32};
use rand::RngExt;
use rand::rngs::SmallRng;
use std::time::Duration;

const WORLDS: [u32; 7] = [1, 2, 3, 4, 5, 8, 16];

/// The regime's pieces in the tests: small, so that blocks cut their shares in several.
const PIECE: usize = 8 << 10;

/// A plan whose packet paths end at 256 bytes, so the one-pass regime runs from small sizes,
/// and whose pieces are [`PIECE`].
fn plan() -> Plan {
    Plan {
        latency_threshold: 256,
        chunk_bytes: PIECE as u64,
        ..Plan::DEFAULT
    }
}

fn communicator(world: u32, buffers: Buffers) -> Communicator {
    buffers
        .apply(
            Communicator::builder(world)
                .latency_window_bytes(1024)
                .staging_half_bytes(8192)
                .timeout(Duration::from_secs(20)),
        )
        .build()
        .unwrap()
}

/// The one-pass communicators of `world` ranks: symmetric buffers, ordinary buffers every
/// peer reaches, and ordinary buffers every peer reaches but one rank's (every call staged).
struct OnePassKinds {
    kinds: Vec<(Buffers, Communicator)>,
}

impl OnePassKinds {
    fn new(world: u32) -> Self {
        let kinds = [
            Buffers::Symmetric,
            Buffers::Reached(None),
            Buffers::Reached(Some(world - 1)),
        ]
        .into_iter()
        .map(|b| (b, communicator(world, b)))
        .collect();
        Self { kinds }
    }

    /// One of them, drawn for a call: symmetric or reached alike often, the fallback less.
    fn draw(&self, rng: &mut SmallRng) -> (Buffers, &Communicator) {
        let i = [0, 0, 1, 1, 2][rng.random_range(0..5)];
        let (b, c) = &self.kinds[i];
        (*b, c)
    }
}

/// Part sizes in elements of `size` bytes: 0, one, odd, around the packet threshold, random;
/// with `large`, also past several pieces of the regime (each block's share of an AllReduce
/// shard is cut in pieces).
fn counts(rng: &mut SmallRng, size: usize, world: u32, large: bool) -> Vec<usize> {
    let piece = PIECE / size;
    let mut c = vec![0, 1, 7, 256 / size + 1, rng.random_range(1..4096)];
    if large {
        c.push(world as usize * 2 * piece + 3);
    }
    c
}

/// Whether a reduction case also runs the large size (the f32 and bf16 sums: the emulation is
/// slow, and the pieces are the same for every type).
fn large(dtype: DataType, op: ReduceOpKind) -> bool {
    matches!(dtype, DataType::F32 | DataType::Bf16) && op == ReduceOpKind::Sum
}

fn poisoned(bytes: usize) -> Buffer {
    let b = Buffer::zeroed(bytes);
    b.fill(POISON);
    b
}

fn poisoned_per_rank(world: usize, bytes: usize) -> Vec<Buffer> {
    (0..world).map(|_| poisoned(bytes)).collect()
}

/// One buffer per input, holding it.
fn buffers(inputs: &[Vec<u8>]) -> Vec<Buffer> {
    inputs.iter().map(|i| Buffer::from_slice(i)).collect()
}

/// `counts` once for each of `world` ranks (every rank passes the same V counts).
fn counts_per_rank(world: usize, counts: &[u64]) -> Vec<Buffer> {
    (0..world).map(|_| Buffer::from_slice(counts)).collect()
}

/// Asserts that every buffer of `got` holds `want`.
fn check_everywhere(what: &str, got: &[Buffer], want: &[u8]) {
    for (r, d) in got.iter().enumerate() {
        assert!(d.bytes() == want, "{what}, rank {r}");
    }
}

/// What an AllToAll of `n`-byte parts leaves on rank `r`: part `r` of every input, in rank
/// order.
fn all_to_all_part(inputs: &[Vec<u8>], r: usize, n: usize) -> Vec<u8> {
    inputs
        .iter()
        .flat_map(|i| i[r * n..(r + 1) * n].to_vec())
        .collect()
}

fn random_bytes(rng: &mut SmallRng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.random::<u8>()).collect()
}

fn check_reduced(what: &str, dtype: DataType, op: ReduceOpKind, srcs: &[&[u8]], got: &[u8]) {
    assert!(
        reference_f32(dtype, op, srcs) == got,
        "{what}: not bit-exact with the f32 rank-order reference"
    );
    assert_eq!(
        count_wrong_f64(dtype, op, srcs, got),
        0,
        "{what}: outside the f64 tolerance"
    );
}

fn launch(kind: CollectiveKind, bytes: u64, blocks: u32, threads: u32) -> Launch {
    let mut l = Launch::new(kind, bytes);
    l.plan = plan();
    l.blocks = blocks;
    l.threads = threads;
    l
}

/// A shape drawn for one call: 1 to 3 blocks of 1 thread, or at worlds up to 4 (where the
/// emulation's threads stay few) of 64.
fn shape(rng: &mut SmallRng, world: u32) -> (u32, u32) {
    let threads = if world <= 4 {
        [1, 64][rng.random_range(0..2)]
    } else {
        1
    };
    (rng.random_range(1..=3), threads)
}

/// One call of a reduction test: the world, type, operator and count, and the shape drawn
/// for it.
struct Reduction {
    buffers: Buffers,
    world: u32,
    dtype: DataType,
    op: ReduceOpKind,
    count: usize,
    blocks: u32,
    threads: u32,
}

impl Reduction {
    /// The bytes of `count` elements.
    fn bytes(&self) -> usize {
        self.count * self.dtype.size()
    }

    /// The launch of `kind` moving [`Self::bytes`] per part.
    fn launch(&self, kind: CollectiveKind) -> Launch {
        launch(kind, self.bytes() as u64, self.blocks, self.threads).typed(self.dtype, self.op)
    }

    /// `world` random inputs of `count` elements each.
    fn inputs(&self, rng: &mut SmallRng, count: usize) -> Vec<Vec<u8>> {
        (0..self.world)
            .map(|_| random_elements(rng, self.dtype, self.op, count))
            .collect()
    }

    /// Checks every rank's output in `dst` against the reduction of `parts(rank)`.
    fn check<'a>(&self, what: &str, dst: &[Buffer], parts: impl Fn(usize) -> Vec<&'a [u8]>) {
        for (r, d) in dst.iter().enumerate() {
            let what = format!("{what}, rank {r}");
            check_reduced(&what, self.dtype, self.op, &parts(r), &d.bytes());
        }
    }
}

impl std::fmt::Display for Reduction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} world {} {:?} {:?} {} elements, {} blocks x {}",
            self.buffers, self.world, self.dtype, self.op, self.count, self.blocks, self.threads
        )
    }
}

/// Runs `call` on a one-pass communicator of every world (drawn per call: symmetric buffers
/// or ordinary buffers the peers reach, see [`OnePassKinds`]), for every element type,
/// operator and count of the reduction tests.
fn for_every_reduction(
    rng: &mut SmallRng,
    mut call: impl FnMut(&mut SmallRng, &Communicator, &Reduction),
) {
    for world in WORLDS {
        let kinds = OnePassKinds::new(world);
        for dtype in DataType::ALL {
            for op in ReduceOpKind::ALL {
                for count in counts(rng, dtype.size(), world, large(dtype, op)) {
                    let (blocks, threads) = shape(rng, world);
                    let (buffers, comm) = kinds.draw(rng);
                    let case = Reduction {
                        buffers,
                        world,
                        dtype,
                        op,
                        count,
                        blocks,
                        threads,
                    };
                    call(rng, comm, &case);
                }
            }
        }
    }
}

/// Runs `call` for every world of [`WORLDS`] on its one-pass communicators and an ordinary
/// one.
fn for_every_world(mut call: impl FnMut(u32, &OnePassKinds, &Communicator)) {
    for world in WORLDS {
        call(
            world,
            &OnePassKinds::new(world),
            &communicator(world, Buffers::Ordinary),
        );
    }
}

#[test]
fn all_reduce_over_symmetric_buffers() {
    let mut rng = fresh_rng("all_reduce_over_symmetric_buffers");
    for_every_reduction(&mut rng, |rng, comm, c| {
        let inputs = c.inputs(rng, c.count);
        let in_place = rng.random_bool(0.3);
        let src = buffers(&inputs);
        let dst: Vec<Buffer> = if in_place {
            src.iter().map(|b| Buffer::from_slice(&b.bytes())).collect()
        } else {
            poisoned_per_rank(c.world as usize, c.bytes())
        };
        let what = format!("all_reduce {c}, in place {in_place}");
        let srcs = if in_place { &dst } else { &src };
        comm.run(&c.launch(CollectiveKind::AllReduce), srcs, &dst, None)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        c.check(&what, &dst, |_| {
            inputs.iter().map(|v| v.as_slice()).collect()
        });
    });
}

#[test]
fn reduce_scatter_over_symmetric_buffers() {
    let mut rng = fresh_rng("reduce_scatter_over_symmetric_buffers");
    for_every_reduction(&mut rng, |rng, comm, c| {
        let n = c.bytes();
        let inputs = c.inputs(rng, c.count * c.world as usize);
        let dst = poisoned_per_rank(c.world as usize, n);
        let what = format!("reduce_scatter {c}");
        comm.run(
            &c.launch(CollectiveKind::ReduceScatter),
            &buffers(&inputs),
            &dst,
            None,
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        c.check(&what, &dst, |r| {
            inputs.iter().map(|v| &v[r * n..(r + 1) * n]).collect()
        });
    });
}

#[test]
fn all_gather_and_all_to_all_over_symmetric_buffers() {
    let mut rng = fresh_rng("all_gather_and_all_to_all_over_symmetric_buffers");
    for_every_world(|world, kinds, plain| {
        let w = world as usize;
        for n in counts(&mut rng, 1, world, true) {
            let (blocks, threads) = shape(&mut rng, world);
            let (kind, comm) = kinds.draw(&mut rng);
            // AllGather: every rank's part in rank order, everywhere.
            let inputs: Vec<Vec<u8>> = (0..w).map(|_| random_bytes(&mut rng, n)).collect();
            let src = buffers(&inputs);
            let dst = poisoned_per_rank(w, n * w);
            let l = launch(CollectiveKind::AllGather, n as u64, blocks, threads);
            comm.run(&l, &src, &dst, None)
                .unwrap_or_else(|e| panic!("all_gather {kind:?} world {world} {n} B: {e}"));
            let want = inputs.concat();
            check_everywhere(
                &format!("all_gather {kind:?} world {world} {n} B"),
                &dst,
                &want,
            );
            // The same onto ordinary outputs: every rank pulls from the peers' inputs.
            let table: Vec<u64> = src.iter().map(Buffer::addr).collect();
            let pulled = poisoned_per_rank(w, n * w);
            let args = |rank: u32| {
                let r = rank as usize;
                let mut a = SnacArgs::new(pulled[r].as_mut_ptr(), src[r].as_ptr(), n as u64, 2);
                (a.src_peers, a.buffers) = (table.as_ptr(), 3);
                a
            };
            let what = format!("all_gather pulled world {world} {n} B");
            // SAFETY: every input holds n bytes and every output world × n; the table names
            // every input; every rank makes the same call.
            launch_ok(&what, plain, args, |a, ctx| unsafe {
                collective::all_gather::<Host, Runtime>(a, ctx)
            });
            check_everywhere(&what, &pulled, &want);
            // AllToAll: part r of every rank's input, in rank order, on rank r.
            let inputs: Vec<Vec<u8>> = (0..w).map(|_| random_bytes(&mut rng, n * w)).collect();
            let src = buffers(&inputs);
            let dst = poisoned_per_rank(w, n * w);
            let l = launch(CollectiveKind::AllToAll, n as u64, blocks, threads);
            comm.run(&l, &src, &dst, None)
                .unwrap_or_else(|e| panic!("all_to_all {kind:?} world {world} {n} B: {e}"));
            for (r, d) in dst.iter().enumerate() {
                assert!(
                    d.bytes() == all_to_all_part(&inputs, r, n),
                    "all_to_all {kind:?} world {world} {n} B, rank {r}"
                );
            }
        }
    });
}

/// Runs `call(args, ctx)` on every rank of `comm` (2 blocks of 64 threads) with `args(rank)`
/// completed by the block, the shared memory and the test plan.
fn launch_all(
    comm: &Communicator,
    args: impl Fn(u32) -> SnacArgs + Sync,
    call: impl Fn(&SnacArgs, &purlin_device::context::Context) + Sync,
) -> Result<(), EmulationError> {
    comm.launch_threads(2, 64, None, |rank, block, ctx, smem| {
        let mut a = args(rank);
        (a.blocks, a.block, a.smem, a.plan) = (2, block, smem, plan());
        call(&a, &ctx);
    })
}

/// [`launch_all`] of a call that must succeed.
fn launch_ok(
    what: &str,
    comm: &Communicator,
    args: impl Fn(u32) -> SnacArgs + Sync,
    call: impl Fn(&SnacArgs, &purlin_device::context::Context) + Sync,
) {
    launch_all(comm, args, call).unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// In place: AllGather's input is the rank's part of its output (the table names the
/// outputs), ReduceScatter's output the rank's part of its input (the table names the inputs).
#[test]
fn in_place_over_symmetric_buffers() {
    let mut rng = fresh_rng("in_place_over_symmetric_buffers");
    for world in [2u32, 3, 8] {
        let comm = communicator(world, Buffers::Ordinary);
        let w = world as usize;
        for n in [16usize, 4096 + 16, 3 * PIECE + 48] {
            // AllGather: rank r's part is already in place; the rest is poison.
            let gathered = random_bytes(&mut rng, n * w);
            let dst: Vec<Buffer> = (0..w)
                .map(|r| {
                    let mut v = vec![POISON; n * w];
                    v[r * n..(r + 1) * n].copy_from_slice(&gathered[r * n..(r + 1) * n]);
                    Buffer::from_slice(&v)
                })
                .collect();
            let outputs: Vec<u64> = dst.iter().map(Buffer::addr).collect();
            let args = |rank: u32| {
                let d = &dst[rank as usize];
                let src = d.as_ptr().wrapping_add(rank as usize * n);
                let mut a = SnacArgs::new(d.as_mut_ptr(), src, n as u64, 2);
                (a.dst_peers, a.buffers) = (outputs.as_ptr(), 5 << 32);
                a
            };
            let what = format!("all_gather in place world {world} {n} B");
            // SAFETY: every output holds `world × n` bytes, each input is its rank's part of
            // it, the table names every output; every rank makes the same call.
            launch_ok(&what, &comm, args, |a, ctx| unsafe {
                collective::all_gather::<Host, Runtime>(a, ctx)
            });
            check_everywhere(&what, &dst, &gathered);
            // ReduceScatter of f32 sums: rank r's output is part r of its input.
            let count = n / 4;
            let inputs: Vec<Vec<u8>> = (0..w)
                .map(|_| random_elements(&mut rng, DataType::F32, ReduceOpKind::Sum, count * w))
                .collect();
            let src = buffers(&inputs);
            let table: Vec<u64> = src.iter().map(Buffer::addr).collect();
            let args = |rank: u32| {
                let s = &src[rank as usize];
                let dst = s.as_mut_ptr().wrapping_add(rank as usize * n);
                let mut a = SnacArgs::new(dst, s.as_ptr(), n as u64, 2);
                (a.src_peers, a.buffers) = (table.as_ptr(), 6);
                a
            };
            // SAFETY: as above, with the inputs in the table and each output inside its input.
            launch_ok(
                &format!("reduce_scatter in place world {world} {n} B"),
                &comm,
                args,
                |a, ctx| unsafe {
                    collective::reduce_scatter_op::<Host, Runtime, f32>(a, ctx, ReduceOpKind::Sum)
                },
            );
            for (r, s) in src.iter().enumerate() {
                let parts: Vec<&[u8]> = inputs.iter().map(|v| &v[r * n..(r + 1) * n]).collect();
                let got = s.bytes_at(r * n, n);
                check_reduced(
                    &format!("reduce_scatter in place world {world} {n} B rank {r}"),
                    DataType::F32,
                    ReduceOpKind::Sum,
                    &parts,
                    &got,
                );
            }
        }
    }
}

/// Counts for a V call over `world` ranks: zeros, ones, odd and random values, or one large
/// part (several of the regime's pieces).
fn v_counts(rng: &mut SmallRng, world: u32, size: usize) -> Vec<u64> {
    let piece = (PIECE / size) as u64;
    let mut c: Vec<u64> = (0..world)
        .map(|_| match rng.random_range(0..4) {
            0 => 0,
            1 => rng.random_range(1..4),
            _ => rng.random_range(1..2 * piece),
        })
        .collect();
    if rng.random_range(0..3) == 0 {
        c[rng.random_range(0..world as usize)] = 3 * piece + 5;
    }
    c
}

/// Elements before each part (the V layouts' starts).
fn starts(counts: &[u64]) -> Vec<usize> {
    counts
        .iter()
        .scan(0usize, |at, &c| {
            Some(std::mem::replace(at, *at + c as usize))
        })
        .collect()
}

/// AllGatherV (pushing onto symmetric outputs, pulling onto ordinary ones, in place) and
/// ReduceScatterV (every type and operator) over symmetric buffers, skewed counts with zeros.
#[test]
fn v_forms_over_symmetric_buffers() {
    let mut rng = fresh_rng("v_forms_over_symmetric_buffers");
    for_every_world(|world, kinds, plain| {
        let w = world as usize;
        for case in 0..6 {
            let (blocks, threads) = shape(&mut rng, world);
            let (kind, comm) = kinds.draw(&mut rng);
            let elem = [1usize, 2, 4][case % 3];
            let counts = v_counts(&mut rng, world, elem);
            let what = format!(
                "{kind:?} world {world} counts {counts:?} elem {elem}, {blocks} blocks x {threads}"
            );
            let inputs: Vec<Vec<u8>> = counts
                .iter()
                .map(|&c| random_bytes(&mut rng, c as usize * elem))
                .collect();
            let want = inputs.concat();
            // AllGatherV pushing: every rank's part into every (symmetric) output.
            let src = buffers(&inputs);
            let dst = poisoned_per_rank(w, want.len());
            let mut l = launch(CollectiveKind::AllGatherV, 0, blocks, threads);
            l.elem_bytes = elem as u32;
            comm.run(&l, &src, &dst, Some(&counts_per_rank(w, &counts)))
                .unwrap_or_else(|e| panic!("all_gather_v {what}: {e}"));
            check_everywhere(&format!("all_gather_v {what}"), &dst, &want);
            // Pulling onto ordinary outputs, and pushing in place (each rank's part already in
            // its symmetric output).
            let at = starts(&counts);
            let table: Vec<u64> = src.iter().map(Buffer::addr).collect();
            let pulled = poisoned_per_rank(w, want.len());
            let placed: Vec<Buffer> = (0..w)
                .map(|r| {
                    let mut v = vec![POISON; want.len()];
                    let part = at[r] * elem..(at[r] + counts[r] as usize) * elem;
                    v[part.clone()].copy_from_slice(&want[part]);
                    Buffer::from_slice(&v)
                })
                .collect();
            let outputs: Vec<u64> = placed.iter().map(Buffer::addr).collect();
            for in_place in [false, true] {
                let args = |rank: u32| {
                    let r = rank as usize;
                    let mut a = if in_place {
                        let d = &placed[r];
                        let own = d.as_ptr().wrapping_add(at[r] * elem);
                        let mut a = SnacArgs::new(d.as_mut_ptr(), own, 0, 2);
                        (a.dst_peers, a.buffers) = (outputs.as_ptr(), 9 << 32);
                        a.bounded(counts[r] * elem as u64, want.len() as u64, u64::MAX)
                    } else {
                        let mut a = SnacArgs::new(pulled[r].as_mut_ptr(), src[r].as_ptr(), 0, 2);
                        (a.src_peers, a.buffers) = (table.as_ptr(), 8);
                        a.bounded(src[r].len() as u64, want.len() as u64, u64::MAX)
                    };
                    (a.counts, a.elem_bytes) = (counts.as_ptr(), elem as u32);
                    a
                };
                // SAFETY: every input holds its count, every output the sum; the tables name
                // every input (pull) or every output (in place); every rank makes the same call.
                launch_ok(
                    &format!("all_gather_v in place {in_place} {what}"),
                    plain,
                    args,
                    |a, ctx| unsafe { collective::all_gather_v::<Host, Runtime>(a, ctx) },
                );
                check_everywhere(
                    &format!("all_gather_v in place {in_place} {what}"),
                    if in_place { &placed } else { &pulled },
                    &want,
                );
            }
            // ReduceScatterV of a type and operator drawn for the case.
            let dtype = DataType::ALL[rng.random_range(0..DataType::ALL.len())];
            let op = ReduceOpKind::ALL[rng.random_range(0..ReduceOpKind::ALL.len())];
            let size = dtype.size();
            let counts = v_counts(&mut rng, world, size);
            let at = starts(&counts);
            let total: u64 = counts.iter().sum();
            let inputs: Vec<Vec<u8>> = (0..w)
                .map(|_| random_elements(&mut rng, dtype, op, total as usize))
                .collect();
            let src = buffers(&inputs);
            let dst: Vec<Buffer> = counts
                .iter()
                .map(|&c| poisoned(c as usize * size))
                .collect();
            let l = launch(CollectiveKind::ReduceScatterV, 0, blocks, threads).typed(dtype, op);
            let what = format!(
                "reduce_scatter_v {kind:?} world {world} {dtype:?} {op:?} counts {counts:?}"
            );
            comm.run(&l, &src, &dst, Some(&counts_per_rank(w, &counts)))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            for (r, d) in dst.iter().enumerate() {
                let part = at[r] * size..(at[r] + counts[r] as usize) * size;
                let parts: Vec<&[u8]> = inputs.iter().map(|v| &v[part.clone()]).collect();
                check_reduced(&format!("{what}, rank {r}"), dtype, op, &parts, &d.bytes());
            }
        }
    });
}

/// AllToAllV drawing per-pair counts (skewed, with zeros, every rank its own row) on every
/// kind of one-pass communicator: where the peers reach the ordinary buffers each rank
/// announces where its part for each peer starts and the peer pulls it; where one rank's are
/// out of reach, and on the symmetric communicator (which gives AllToAllV no tables: its pass
/// needs the exchanged addresses), the call stages.
#[test]
fn all_to_all_v_over_exchanged_addresses() {
    let mut rng = fresh_rng("all_to_all_v_over_exchanged_addresses");
    for_every_world(|world, kinds, _| {
        let w = world as usize;
        for case in 0..4 {
            let (blocks, threads) = shape(&mut rng, world);
            let (kind, comm) = kinds.draw(&mut rng);
            let elem = [1usize, 2, 4, 8][case];
            // sent[p][q]: elements rank p sends rank q.
            let sent: Vec<Vec<u64>> = (0..w).map(|_| v_counts(&mut rng, world, elem)).collect();
            let inputs: Vec<Vec<u8>> = sent
                .iter()
                .map(|row| random_bytes(&mut rng, row.iter().sum::<u64>() as usize * elem))
                .collect();
            // Rank q's output: rank p's part for q, in rank order.
            let want: Vec<Vec<u8>> = (0..w)
                .map(|q| {
                    (0..w)
                        .flat_map(|p| {
                            let at = starts(&sent[p])[q] * elem;
                            inputs[p][at..at + sent[p][q] as usize * elem].to_vec()
                        })
                        .collect()
                })
                .collect();
            let counts: Vec<Buffer> = (0..w)
                .map(|r| {
                    let received = (0..w).map(|p| sent[p][r]);
                    let row: Vec<u64> = sent[r].iter().copied().chain(received).collect();
                    Buffer::from_slice(&row)
                })
                .collect();
            // Every buffer one element longer than its counts need, poisoned past them.
            let src: Vec<Buffer> = inputs
                .iter()
                .map(|i| Buffer::from_slice(&[i.as_slice(), &vec![POISON; elem]].concat()))
                .collect();
            let dst: Vec<Buffer> = want.iter().map(|v| poisoned(v.len() + elem)).collect();
            let mut l = launch(CollectiveKind::AllToAllV, 0, blocks, threads);
            l.elem_bytes = elem as u32;
            let what = format!(
                "all_to_all_v {kind:?} world {world} elem {elem} sent {sent:?}, {blocks} blocks x {threads}"
            );
            comm.run(&l, &src, &dst, Some(&counts))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            for (r, d) in dst.iter().enumerate() {
                let got = d.bytes();
                let (part, tail) = got.split_at(want[r].len());
                assert!(part == want[r], "{what}, rank {r}");
                assert!(
                    tail.iter().all(|&b| b == POISON),
                    "{what}, rank {r}: wrote past"
                );
            }
        }
    });
}

/// A V call whose ranks disagree — one passes ordinary buffers, or other counts — faults at
/// once on every rank, naming the buffers or the counts; none hangs.
#[test]
fn v_ranks_that_disagree_are_named() {
    let world = 3u32;
    let w = world as usize;
    let counts = [100u64, 0, 4000];
    let other = [100u64, 1, 3999];
    let total: u64 = counts.iter().sum();
    let src: Vec<Buffer> = counts
        .iter()
        .map(|&c| Buffer::from_slice(&vec![7u8; c as usize + 16]))
        .collect();
    let dst = poisoned_per_rank(w, total as usize + 16);
    let outputs: Vec<u64> = dst.iter().map(Buffer::addr).collect();
    for (case, field) in [
        ("ordinary", DigestField::Buffers),
        ("counts", DigestField::Counts),
    ] {
        let args = |rank: u32| {
            let r = rank as usize;
            let mut a = SnacArgs::new(dst[r].as_mut_ptr(), src[r].as_ptr(), 0, 2).bounded(
                src[r].len() as u64,
                dst[r].len() as u64,
                u64::MAX,
            );
            if !(case == "ordinary" && rank == 1) {
                (a.dst_peers, a.buffers) = (outputs.as_ptr(), 4 << 32);
            }
            let mine = if case == "counts" && rank == 2 {
                &other
            } else {
                &counts
            };
            a.counts = mine.as_ptr();
            a
        };
        // SAFETY: every buffer holds what either set of counts moves.
        let named = first_mismatch(case, world, args, |a, ctx| unsafe {
            collective::all_gather_v::<Host, Runtime>(a, ctx)
        });
        assert_eq!(named.field(), field, "{case}: {named}");
    }
}

/// Runs `call` as [`launch_all`] does on a fresh ordinary communicator of `world` ranks (a
/// faulted communicator keeps its fault), for a call that must fault; returns its first fault
/// of `kind`. The call must end well before the communicator's timeout: a rank that disagrees
/// with its peers stops them at once rather than leaving them waiting.
fn first_fault(
    what: &str,
    kind: FaultKind,
    world: u32,
    args: impl Fn(u32) -> SnacArgs + Sync,
    call: impl Fn(&SnacArgs, &purlin_device::context::Context) + Sync,
) -> Fault {
    let start = std::time::Instant::now();
    let faults = match launch_all(&communicator(world, Buffers::Ordinary), args, call) {
        Err(EmulationError::Faults(f)) => f,
        other => panic!("{what}: expected faults, got {other:?}"),
    };
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{what}: took {:?}",
        start.elapsed()
    );
    faults
        .iter()
        .find(|f| f.kind == kind)
        .copied()
        .unwrap_or_else(|| panic!("{what}: {faults:?}"))
}

/// [`first_fault`] for a call whose ranks disagree on what they compare: the first
/// `DigestMismatch`, which names the field.
fn first_mismatch(
    what: &str,
    world: u32,
    args: impl Fn(u32) -> SnacArgs + Sync,
    call: impl Fn(&SnacArgs, &purlin_device::context::Context) + Sync,
) -> Fault {
    first_fault(what, FaultKind::DigestMismatch, world, args, call)
}

/// Ranks that disagree on their buffers — one passes ordinary buffers, or its range at another
/// offset of the symmetric buffer, or says its peers reach its ordinary buffers while theirs
/// say nothing — fault the call at once, naming the buffers; none hangs.
#[test]
fn ranks_that_pass_other_buffers_are_named() {
    let world = 3u32;
    let n = 4096usize;
    // Each rank's src buffer holds two candidate ranges of n bytes.
    let src: Vec<Buffer> = (0..world)
        .map(|r| Buffer::from_slice(&vec![r as u8; 2 * n]))
        .collect();
    let dst = poisoned_per_rank(world as usize, n * world as usize);
    let table: Vec<u64> = src.iter().map(Buffer::addr).collect();
    for (case, odd) in [("ordinary", 0u32), ("offset", 1)] {
        let args = |rank: u32| {
            let s = &src[rank as usize];
            let shifted = case == "offset" && rank == odd;
            let at = s.as_ptr().wrapping_add(if shifted { n } else { 0 });
            let mut a = SnacArgs::new(dst[rank as usize].as_mut_ptr(), at, n as u64, 2);
            if !(case == "ordinary" && rank == odd) {
                (a.src_peers, a.buffers) = (table.as_ptr(), 1);
            }
            a
        };
        // SAFETY: every buffer holds what the call moves; the calls differ only in buffers.
        let named = first_mismatch(case, world, args, |a, ctx| unsafe {
            collective::all_gather::<Host, Runtime>(a, ctx)
        });
        assert_eq!(named.field(), DigestField::Buffers, "{case}: {named}");
        assert!(named.rank == odd || named.peer == odd, "{case}: {named}");
        assert!(named.to_string().contains("symmetric buffers"), "{named}");
    }
    // Ordinary buffers: one rank says its peers reach them, the others say nothing (they
    // would stage while it waits for their addresses).
    let args = |rank: u32| {
        let r = rank as usize;
        let mut a = SnacArgs::new(dst[r].as_mut_ptr(), src[r].as_ptr(), n as u64, 2);
        if rank == 2 {
            a.peers_reach = PeersReach::Reachable;
        }
        a
    };
    // SAFETY: every buffer holds what the call moves; the calls differ only in their reach.
    let named = first_mismatch("reach", world, args, |a, ctx| unsafe {
        collective::all_gather::<Host, Runtime>(a, ctx)
    });
    assert_eq!(named.field(), DigestField::Buffers, "reach: {named}");
    assert!(named.rank == 2 || named.peer == 2, "reach: {named}");
    // The same for AllToAllV, whose counts packet is per pair: the exchange is compared
    // beside it, not folded into it.
    let counts: Vec<u64> = vec![n as u64 / 4; 2 * world as usize];
    let args = |rank: u32| {
        let r = rank as usize;
        let mut a = SnacArgs::new(dst[r].as_mut_ptr(), src[r].as_ptr(), 0, 2).bounded(
            src[r].len() as u64,
            dst[r].len() as u64,
            u64::MAX,
        );
        (a.counts, a.elem_bytes) = (counts.as_ptr(), 1);
        if rank == 2 {
            a.peers_reach = PeersReach::Reachable;
        }
        a
    };
    // SAFETY: every buffer holds what the counts move; the calls differ only in their reach.
    let named = first_mismatch("all_to_all_v reach", world, args, |a, ctx| unsafe {
        collective::all_to_all_v::<Host, Runtime>(a, ctx)
    });
    assert_eq!(
        named.field(),
        DigestField::Buffers,
        "all_to_all_v reach: {named}"
    );
    assert!(
        named.rank == 2 || named.peer == 2,
        "all_to_all_v reach: {named}"
    );
}

/// A table whose entry for the rank does not hold the rank's own buffer is refused on that
/// rank before anything moves; its peers stop at once.
#[test]
fn a_table_that_does_not_name_the_own_buffer_is_refused() {
    let world = 2u32;
    let n = 4096usize;
    let src: Vec<Buffer> = (0..world)
        .map(|r| Buffer::from_slice(&vec![r as u8; n]))
        .collect();
    let dst = poisoned_per_rank(world as usize, 2 * n);
    // Rank 1's own entry lies past its buffer's start: its `src` is not inside.
    let table: Vec<u64> = vec![src[0].addr(), src[1].addr() + 16];
    let args = |rank: u32| {
        let mut a = SnacArgs::new(
            dst[rank as usize].as_mut_ptr(),
            src[rank as usize].as_ptr(),
            n as u64,
            2,
        );
        (a.src_peers, a.buffers) = (table.as_ptr(), 1);
        a
    };
    // SAFETY: the buffers hold what the call moves; the bad entry is refused before use.
    let refused = first_fault(
        "bad own entry",
        FaultKind::InvalidArgument,
        world,
        args,
        |a, ctx| unsafe { collective::all_gather::<Host, Runtime>(a, ctx) },
    );
    assert_eq!(
        (refused.rank, refused.refusal()),
        (1, Refusal::SymmetricBuffers)
    );
    assert!(
        dst[1].bytes().iter().all(|&b| b == POISON),
        "rank 1 moved data"
    );
}
