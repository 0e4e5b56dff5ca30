//! The Atoms' datapaths on CPU threads (the `arch` host implementation): copy bit-exact, reduce
//! bit-exact against the f32 rank-order reference and within tolerance of an f64 reference,
//! every type and operator, edge sizes, fresh random inputs, poisoned outputs; one destination
//! or several (`copy_to_all`, `reduce_to_all`), a destination that is a source (in place).

use purlin::{DataType, ReduceOpKind};
use purlin_device::atom::{Atom, Host, Sm70, Sm80, Sm90, Sm100};
use purlin_device::coop::Coop;
use purlin_device::element::Element;
use purlin_device::op::{ReduceOp, TypedVisitor, dispatch};
use purlin_tests::{POISON, count_wrong_f64, fresh_rng, random_elements, reference_f32};
use rand::RngExt;

/// Sizes from the issue: empty, one, around a vector, odd, and a large odd size.
const SIZES: [usize; 7] = [0, 1, 15, 16, 17, 4095, (1 << 20) + 13];
/// How many destinations a case writes, in turn (one is `copy` / `reduce`).
const DESTINATIONS: [usize; 4] = [1, 3, 8, 16];
const OPS: [ReduceOpKind; 4] = [
    ReduceOpKind::Sum,
    ReduceOpKind::Max,
    ReduceOpKind::Min,
    ReduceOpKind::Prod,
];

/// A 16-byte aligned byte buffer.
struct Buffer(Vec<u128>, usize);

impl Buffer {
    fn from_bytes(bytes: &[u8]) -> Self {
        let mut b = Self::filled(bytes.len(), 0);
        b.bytes_mut().copy_from_slice(bytes);
        b
    }
    fn filled(len: usize, byte: u8) -> Self {
        let words = len.div_ceil(16).max(1);
        let mut v = vec![0u128; words];
        // SAFETY: the Vec holds `words * 16 >= len` initialised bytes.
        unsafe { core::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), len) }.fill(byte);
        Self(v, len)
    }
    fn bytes(&self) -> &[u8] {
        // SAFETY: as in `filled`.
        unsafe { core::slice::from_raw_parts(self.0.as_ptr().cast(), self.1) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `filled`.
        unsafe { core::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.1) }
    }
}

/// Raw pointers that may cross to the scoped worker threads of one cooperative call.
#[derive(Clone, Copy)]
struct Shared<T>(T);
// SAFETY: each worker touches only its own part of the buffers (the Atom contract: a Coop
// splits the work between its members, and ring slots are per member).
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

struct RunReduce<A> {
    dsts: Vec<*mut u8>,
    srcs: Vec<*const u8>,
    count: usize,
    smem: *mut u8,
    threads: u32,
    atom: core::marker::PhantomData<A>,
}

impl<A: Atom> TypedVisitor for RunReduce<A> {
    type Output = ();
    fn visit<T: Element, O: ReduceOp>(self) {
        let srcs: Vec<*const T> = self.srcs.iter().map(|p| p.cast()).collect();
        let dsts: Vec<*mut T> = self.dsts.iter().map(|p| p.cast()).collect();
        let smem = Shared(self.smem);
        let srcs = Shared(srcs.as_slice() as *const [*const T]);
        let dsts = Shared(dsts.as_slice() as *const [*mut T]);
        let (count, threads) = (self.count, self.threads);
        let run = move |coop: Coop| {
            let (smem, srcs, dsts) = (smem, srcs, dsts);
            // SAFETY: buffers hold `count` elements, are 16-byte aligned, and the destinations
            // do not overlap each other; smem is A::SMEM_BYTES.
            unsafe {
                match &*dsts.0 {
                    [dst] => A::reduce::<T, O>(coop, *dst, &*srcs.0, count, smem.0),
                    all => A::reduce_to_all::<T, O>(coop, all, &*srcs.0, count, smem.0),
                }
            }
        };
        run_cooperatively(threads, run);
    }
}

/// Runs one cooperative call of `threads` members: inline for one, one scoped thread each else.
fn run_cooperatively(threads: u32, run: impl Fn(Coop) + Copy + Send) {
    if threads == 1 {
        run(Coop::block());
    } else {
        std::thread::scope(|s| {
            for i in 0..threads {
                s.spawn(move || run(Coop::new(i, threads)));
            }
        });
    }
}

fn smem_for<A: Atom>() -> Buffer {
    Buffer::filled(A::SMEM_BYTES as usize, 0xa5)
}

fn check_copy<A: Atom>(threads: u32) {
    let mut rng = fresh_rng(&format!("copy {} x{threads}", A::NAME));
    for (case, &bytes) in SIZES.iter().enumerate() {
        let dests = DESTINATIONS[case % DESTINATIONS.len()];
        let src: Vec<u8> = (0..bytes).map(|_| rng.random()).collect();
        let src = Buffer::from_bytes(&src);
        let mut dsts: Vec<Buffer> = (0..dests).map(|_| Buffer::filled(bytes, POISON)).collect();
        let mut smem = smem_for::<A>();
        let to: Vec<*mut u8> = dsts.iter_mut().map(|d| d.0.as_mut_ptr().cast()).collect();
        let p = Shared((
            to.as_slice() as *const [*mut u8],
            src.0.as_ptr().cast::<u8>(),
            smem.0.as_mut_ptr().cast::<u8>(),
        ));
        let run = move |coop: Coop| {
            let p = p;
            // SAFETY: every buffer holds `bytes` aligned bytes, none overlaps another; smem is
            // A::SMEM_BYTES.
            unsafe {
                match &*p.0.0 {
                    [dst] => A::copy(coop, *dst, p.0.1, bytes, p.0.2),
                    all => A::copy_to_all(coop, all, p.0.1, bytes, p.0.2),
                }
            }
        };
        run_cooperatively(threads, run);
        for (d, dst) in dsts.iter().enumerate() {
            assert!(
                dst.bytes() == src.bytes(),
                "{} copy of {bytes} bytes with {threads} threads differs in destination {d} of {dests}",
                A::NAME
            );
        }
    }
}

/// Source counts the reduce cases take in turn: one, the general loop's odd counts, and sixteen.
const SOURCE_COUNTS: [usize; 5] = [1, 2, 3, 7, 16];

fn check_reduce<A: Atom>(
    threads: u32,
    dtypes: &[DataType],
    ops: &[ReduceOpKind],
    sizes: &[usize],
    source_counts: &[usize],
) {
    let mut rng = fresh_rng(&format!("reduce {} x{threads}", A::NAME));
    let mut case = 0;
    for &dtype in dtypes {
        for &op in ops {
            for &count in sizes {
                // The large size with two sources keeps the run short; small sizes try them all.
                let n = if count > 100_000 {
                    2
                } else {
                    source_counts[case % source_counts.len()]
                };
                case += 1;
                let dests = DESTINATIONS[(case / 2) % DESTINATIONS.len()];
                // Every third case writes its result over source 0 (in place) as well.
                let in_place = case % 3 == 0;
                let mut inputs: Vec<Buffer> = (0..n)
                    .map(|_| Buffer::from_bytes(&random_elements(&mut rng, dtype, op, count)))
                    .collect();
                let originals: Vec<Buffer> = inputs
                    .iter()
                    .map(|b| Buffer::from_bytes(b.bytes()))
                    .collect();
                let mut outputs: Vec<Buffer> = (0..dests - usize::from(in_place))
                    .map(|_| Buffer::filled(count * dtype.size(), POISON))
                    .collect();
                let mut dsts: Vec<*mut u8> = outputs
                    .iter_mut()
                    .map(|d| d.0.as_mut_ptr().cast())
                    .collect();
                if in_place {
                    dsts.push(inputs[0].0.as_mut_ptr().cast());
                }
                let mut smem = smem_for::<A>();
                dispatch(
                    dtype,
                    op,
                    RunReduce::<A> {
                        dsts,
                        srcs: inputs.iter().map(|b| b.0.as_ptr().cast()).collect(),
                        count,
                        smem: smem.0.as_mut_ptr().cast(),
                        threads,
                        atom: core::marker::PhantomData,
                    },
                );
                let srcs: Vec<&[u8]> = originals.iter().map(|b| b.bytes()).collect();
                let what = format!(
                    "{} x{threads} {} {} count {count} sources {n} destinations {dests}{}",
                    A::NAME,
                    dtype.name(),
                    op.name(),
                    if in_place { " (one in place)" } else { "" }
                );
                let want = reference_f32(dtype, op, &srcs);
                let written = outputs.iter().chain(in_place.then_some(&inputs[0]));
                for (d, dst) in written.enumerate() {
                    assert!(
                        dst.bytes() == want.as_slice(),
                        "{what}: destination {d} differs from the f32 rank-order reference"
                    );
                    let wrong = count_wrong_f64(dtype, op, &srcs, dst.bytes());
                    assert_eq!(
                        wrong, 0,
                        "{what}: {wrong} elements of destination {d} outside the f64 tolerance"
                    );
                }
            }
        }
    }
}

#[test]
fn host_atom_copies_every_size() {
    check_copy::<Host>(1);
}

#[test]
fn host_atom_reduces_every_type_op_and_size() {
    check_reduce::<Host>(1, &DataType::ALL, &OPS, &SIZES, &SOURCE_COUNTS);
}

#[test]
fn gpu_atom_datapaths_copy_on_cpu_threads() {
    check_copy::<Sm70>(1);
    check_copy::<Sm80>(1);
    check_copy::<Sm90>(1);
    check_copy::<Sm100>(1);
    // Several cooperating threads: strided vectors and per-thread ring slots.
    check_copy::<Sm70>(3);
    check_copy::<Sm80>(5);
    check_copy::<Sm90>(4);
}

#[test]
fn gpu_atom_datapaths_reduce_on_cpu_threads() {
    let small = &SIZES[..6];
    check_reduce::<Sm70>(1, &DataType::ALL, &OPS, small, &SOURCE_COUNTS);
    check_reduce::<Sm80>(1, &DataType::ALL, &OPS, small, &SOURCE_COUNTS);
    check_reduce::<Sm90>(1, &DataType::ALL, &OPS, small, &SOURCE_COUNTS);
    // Sizes past a block's whole ring, several types and operators.
    check_reduce::<Sm90>(
        1,
        &[DataType::Bf16, DataType::F32, DataType::E5m2],
        &[ReduceOpKind::Sum, ReduceOpKind::Max],
        &SIZES,
        &SOURCE_COUNTS,
    );
    check_reduce::<Sm100>(1, &[DataType::Bf16], &OPS, small, &SOURCE_COUNTS);
    check_reduce::<Sm70>(
        3,
        &[DataType::F32, DataType::E4m3],
        &[ReduceOpKind::Sum],
        &SIZES,
        &SOURCE_COUNTS,
    );
    check_reduce::<Sm80>(
        5,
        &[DataType::Bf16, DataType::F16],
        &[ReduceOpKind::Sum],
        &SIZES,
        &SOURCE_COUNTS,
    );
}

/// Two, four and eight sources run the ring's written-out passes (`ring_reduce_unrolled` in
/// `sm80.rs`) over the whole passes, then the general loop over the groups left: sizes that end
/// on a pass, a group or an element past either, for one thread and for several (whose vectors
/// interleave), every type.
#[test]
fn ring_reduces_two_four_and_eight_sources_in_whole_passes_then_the_rest() {
    // One thread: a pass is 16 vectors (two sources) down to 2 (eight). Five threads: 80 to 10.
    let sizes = [4096, 4097, 1280 * 16 + 160, 12_289];
    for threads in [1, 5] {
        check_reduce::<Sm80>(
            threads,
            &DataType::ALL,
            &[ReduceOpKind::Sum, ReduceOpKind::Max],
            &sizes,
            &[2, 4, 8],
        );
    }
    check_reduce::<Sm90>(1, &[DataType::Bf16], &OPS, &sizes, &[8, 4, 2]);
}

/// Several whole "blocks" (one CPU thread each, or a few) sharing one range through
/// `Coop::span_of`: interleaved vectors, per-block ring slots, per-block bulk chunks.
fn check_span_copy<A: Atom>(blocks: u32, threads: u32) {
    let mut rng = fresh_rng(&format!("span copy {} {blocks}x{threads}", A::NAME));
    for &bytes in &SIZES {
        let src: Vec<u8> = (0..bytes).map(|_| rng.random()).collect();
        let src = Buffer::from_bytes(&src);
        let mut dst = Buffer::filled(bytes, POISON);
        let mut smems: Vec<Buffer> = (0..blocks).map(|_| smem_for::<A>()).collect();
        let smem_ptrs: Vec<Shared<*mut u8>> = smems
            .iter_mut()
            .map(|m| Shared(m.0.as_mut_ptr().cast::<u8>()))
            .collect();
        let p = Shared((dst.0.as_mut_ptr().cast::<u8>(), src.0.as_ptr().cast::<u8>()));
        std::thread::scope(|s| {
            for b in 0..blocks {
                for t in 0..threads {
                    let smem = smem_ptrs[b as usize];
                    s.spawn(move || {
                        let (p, smem) = (p, smem);
                        let coop = Coop::span_of(b, blocks, t, threads);
                        // SAFETY: both buffers hold `bytes` aligned bytes; each block has its own smem.
                        unsafe { A::copy(coop, p.0.0, p.0.1, bytes, smem.0) }
                    });
                }
            }
        });
        assert!(
            dst.bytes() == src.bytes(),
            "{} span copy of {bytes} bytes, {blocks} blocks x {threads}",
            A::NAME
        );
    }
}

#[test]
fn grid_spans_copy_on_cpu_threads() {
    check_span_copy::<Sm70>(3, 2);
    check_span_copy::<Sm80>(3, 2);
    // One thread per block keeps the host barrier (a no-op) sound for the bulk path.
    check_span_copy::<Sm90>(4, 1);
    check_span_copy::<Sm90>(1, 1);
}
