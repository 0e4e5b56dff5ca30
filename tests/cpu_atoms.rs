//! The Atoms' datapaths on CPU threads (the `arch` host implementation): copy bit-exact, reduce
//! bit-exact against the f32 rank-order reference and within tolerance of an f64 reference,
//! every type and operator, edge sizes, fresh random inputs, poisoned outputs.

use purlin::{DataType, ReduceOpKind};
use purlin_device::atom::{Atom, Host, Sm70, Sm80, Sm90, Sm100};
use purlin_device::coop::Coop;
use purlin_device::element::Element;
use purlin_device::op::{ReduceOp, TypedVisitor, dispatch};
use purlin_tests::{POISON, count_wrong_f64, fresh_rng, random_elements, reference_f32};
use rand::RngExt;

/// Sizes from the issue: empty, one, around a vector, odd, and a large odd size.
const SIZES: [usize; 7] = [0, 1, 15, 16, 17, 4095, (1 << 20) + 13];
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
    dst: *mut u8,
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
        let args = Shared((self.dst.cast::<T>(), self.smem));
        let srcs = Shared(srcs.as_slice() as *const [*const T]);
        let (count, threads) = (self.count, self.threads);
        let run = move |coop: Coop| {
            let (args, srcs) = (args, srcs);
            // SAFETY: buffers hold `count` elements, are 16-byte aligned; smem is A::SMEM_BYTES.
            unsafe { A::reduce::<T, O>(coop, args.0.0, &*srcs.0, count, args.0.1) }
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
    for &bytes in &SIZES {
        let src: Vec<u8> = (0..bytes).map(|_| rng.random()).collect();
        let src = Buffer::from_bytes(&src);
        let mut dst = Buffer::filled(bytes, POISON);
        let mut smem = smem_for::<A>();
        let p = Shared((
            dst.0.as_mut_ptr().cast::<u8>(),
            src.0.as_ptr().cast::<u8>(),
            smem.0.as_mut_ptr().cast::<u8>(),
        ));
        let run = move |coop: Coop| {
            let p = p;
            // SAFETY: both buffers hold `bytes` aligned bytes; smem is A::SMEM_BYTES.
            unsafe { A::copy(coop, p.0.0, p.0.1, bytes, p.0.2) }
        };
        run_cooperatively(threads, run);
        assert!(
            dst.bytes() == src.bytes(),
            "{} copy of {bytes} bytes with {threads} threads differs",
            A::NAME
        );
    }
}

fn check_reduce<A: Atom>(threads: u32, dtypes: &[DataType], ops: &[ReduceOpKind], sizes: &[usize]) {
    let mut rng = fresh_rng(&format!("reduce {} x{threads}", A::NAME));
    let source_counts = [1usize, 2, 3, 7, 16];
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
                let inputs: Vec<Buffer> = (0..n)
                    .map(|_| Buffer::from_bytes(&random_elements(&mut rng, dtype, op, count)))
                    .collect();
                let mut dst = Buffer::filled(count * dtype.size(), POISON);
                let mut smem = smem_for::<A>();
                dispatch(
                    dtype,
                    op,
                    RunReduce::<A> {
                        dst: dst.0.as_mut_ptr().cast(),
                        srcs: inputs.iter().map(|b| b.0.as_ptr().cast()).collect(),
                        count,
                        smem: smem.0.as_mut_ptr().cast(),
                        threads,
                        atom: core::marker::PhantomData,
                    },
                );
                let srcs: Vec<&[u8]> = inputs.iter().map(|b| b.bytes()).collect();
                let what = format!(
                    "{} x{threads} {} {} count {count} sources {n}",
                    A::NAME,
                    dtype.name(),
                    op.name()
                );
                assert!(
                    dst.bytes() == reference_f32(dtype, op, &srcs).as_slice(),
                    "{what}: differs from the f32 rank-order reference"
                );
                let wrong = count_wrong_f64(dtype, op, &srcs, dst.bytes());
                assert_eq!(
                    wrong, 0,
                    "{what}: {wrong} elements outside the f64 tolerance"
                );
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
    check_reduce::<Host>(1, &DataType::ALL, &OPS, &SIZES);
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
    check_reduce::<Sm70>(1, &DataType::ALL, &OPS, small);
    check_reduce::<Sm80>(1, &DataType::ALL, &OPS, small);
    check_reduce::<Sm90>(1, &DataType::ALL, &OPS, small);
    check_reduce::<Sm100>(1, &[DataType::Bf16], &OPS, small);
    check_reduce::<Sm70>(
        3,
        &[DataType::F32, DataType::E4m3],
        &[ReduceOpKind::Sum],
        &SIZES,
    );
    check_reduce::<Sm80>(
        5,
        &[DataType::Bf16, DataType::F16],
        &[ReduceOpKind::Sum],
        &SIZES,
    );
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
