//! Every Atom of the sm_70, sm_80 and sm_90 PTX (the older ones through the driver's JIT) ×
//! every type × operator × edge sizes up to 256 MiB: copies bit-exact, reductions bit-exact
//! against the host f32 rank-order reference; and a fused kernel that does its own work, then
//! calls the Atom copy.

use crate::support::{download, poisoned, upload};
use cudarc::driver::{CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use purlin::atom::{self, AtomKind, GridLayout, Launch};
use purlin::ptx::Arch;
use purlin::{DataType, Gpu, ReduceOpKind};
use purlin_tests::{
    device_addr, fresh_rng, gpu_or_skip, random_elements, random_elements_parallel, reference_f32,
};
use rand::RngExt;
use std::sync::Arc;

const SIZES: [usize; 7] = [0, 1, 15, 16, 17, 4095, (1 << 20) + 13];
const BIG: usize = 256 << 20;
const OPS: [ReduceOpKind; 3] = [ReduceOpKind::Sum, ReduceOpKind::Max, ReduceOpKind::Min];
const ARCHS: [Arch; 3] = [Arch::Sm70, Arch::Sm80, Arch::Sm90];

/// What both reduction tests check every Atom on: `count` elements of `dtype` reduced with `op`,
/// and `want`, the f32 rank-order reference of the inputs.
struct Reduction {
    dtype: DataType,
    op: ReduceOpKind,
    count: usize,
    want: Vec<u8>,
}

impl Reduction {
    fn new(dtype: DataType, op: ReduceOpKind, inputs: &[&[u8]]) -> Self {
        Self {
            dtype,
            op,
            count: inputs[0].len() / dtype.size(),
            want: reference_f32(dtype, op, inputs),
        }
    }

    /// Runs `atom::reduce` with `launch` of the inputs' copies at `srcs` into a poisoned output
    /// and asserts that it holds `want`.
    ///
    /// # Safety
    /// As `atom::reduce`: every buffer at `srcs` holds `count` elements of `dtype` and outlives
    /// the synchronisation.
    unsafe fn check(&self, gpu: &Gpu, stream: &Arc<CudaStream>, launch: Launch, srcs: &[u64]) {
        let (dtype, op, count) = (self.dtype, self.op, self.count);
        let dst = poisoned(stream, count * dtype.size());
        let at = device_addr(&dst, stream);
        // SAFETY: forwarded contract; `dst` holds `count` elements.
        unsafe { atom::reduce(gpu, stream, launch, dtype, op, at, srcs, count as u64) }.unwrap();
        let got = download(stream, &dst, self.want.len());
        assert!(
            got == self.want,
            "{} PTX: {} {} of {count} elements from {} sources with {launch:?} differs from the f32 \
             rank-order reference",
            gpu.arch(),
            dtype.name(),
            op.name(),
            srcs.len()
        );
    }
}

/// Copies `src` with `launch` from a device buffer into a poisoned one and asserts that it
/// arrives bit for bit.
fn check_copy(gpu: &Gpu, stream: &Arc<CudaStream>, launch: Launch, src: &[u8]) {
    let bytes = src.len();
    let (src_d, dst_d) = (upload(stream, src), poisoned(stream, bytes));
    let (to, from) = (device_addr(&dst_d, stream), device_addr(&src_d, stream));
    // SAFETY: both buffers hold at least `bytes` bytes and outlive the synchronisation.
    unsafe { atom::copy(gpu, stream, launch, to, from, bytes as u64) }.unwrap();
    assert!(
        download(stream, &dst_d, bytes) == src,
        "{} PTX: copy of {bytes} bytes with {launch:?} differs",
        gpu.arch()
    );
}

/// Block counts to try: one block, an odd few, and two full waves.
fn block_counts(gpu: &Gpu) -> [u32; 3] {
    [1, 7, 2 * gpu.sm_count()]
}

#[test]
fn every_atom_copies_every_size_bit_exact() {
    let mut ran = 0;
    for arch in ARCHS {
        let Some(gpu) = gpu_or_skip("atom copy", Some(arch)) else {
            continue;
        };
        let stream = gpu.new_stream().unwrap();
        let mut rng = fresh_rng(&format!("gpu copy {arch}"));
        for atom in AtomKind::available_in(arch) {
            for (i, &bytes) in SIZES.iter().chain([BIG].iter()).enumerate() {
                let src: Vec<u8> = (0..bytes).map(|_| rng.random()).collect();
                let blocks = block_counts(&gpu)[i % 3];
                let launch = Launch {
                    atom,
                    blocks,
                    layout: GridLayout::ALL[i % 2],
                };
                check_copy(&gpu, &stream, launch, &src);
                ran += 1;
            }
        }
    }
    println!("atom copy cases run: {ran}");
}

#[test]
fn every_atom_reduces_every_type_op_size_bit_exact() {
    let mut ran = 0;
    let source_counts = [1usize, 2, 3, 8, 16];
    for arch in ARCHS {
        let Some(gpu) = gpu_or_skip("atom reduce", Some(arch)) else {
            continue;
        };
        let stream = gpu.new_stream().unwrap();
        let mut rng = fresh_rng(&format!("gpu reduce {arch}"));
        let mut case = 0usize;
        for dtype in DataType::ALL {
            for op in OPS {
                for &count in &SIZES {
                    let n = source_counts[case % source_counts.len()];
                    let blocks = block_counts(&gpu)[case % 3];
                    let layout = GridLayout::ALL[(case / 3) % 2];
                    case += 1;
                    let inputs: Vec<Vec<u8>> = (0..n)
                        .map(|_| random_elements(&mut rng, dtype, op, count))
                        .collect();
                    let srcs: Vec<&[u8]> = inputs.iter().map(|v| v.as_slice()).collect();
                    let reduction = Reduction::new(dtype, op, &srcs);
                    let bufs: Vec<CudaSlice<u8>> =
                        inputs.iter().map(|v| upload(&stream, v)).collect();
                    let addrs: Vec<u64> = bufs.iter().map(|b| device_addr(b, &stream)).collect();
                    for atom in AtomKind::available_in(arch) {
                        let launch = Launch {
                            atom,
                            blocks,
                            layout,
                        };
                        // SAFETY: every buffer holds `count` elements and outlives the synchronisation.
                        unsafe { reduction.check(&gpu, &stream, launch, &addrs) };
                        ran += 1;
                    }
                }
            }
        }
    }
    println!("atom reduce cases run: {ran}");
}

#[test]
fn every_atom_reduces_256_mib_bit_exact() {
    let mut ran = 0;
    let gpus: Vec<(Arch, Arc<Gpu>)> = ARCHS
        .iter()
        .filter_map(|&a| gpu_or_skip("atom reduce 256 MiB", Some(a)).map(|g| (a, g)))
        .collect();
    if gpus.is_empty() {
        return;
    }
    let seed = fresh_rng("gpu reduce 256 MiB").random::<u64>();
    for dtype in DataType::ALL {
        for op in OPS {
            let count = BIG / dtype.size();
            let inputs = [
                random_elements_parallel(seed, dtype, op, count),
                random_elements_parallel(seed.wrapping_add(1), dtype, op, count),
            ];
            let reduction = Reduction::new(dtype, op, &[&inputs[0], &inputs[1]]);
            for (arch, gpu) in &gpus {
                let stream = gpu.new_stream().unwrap();
                let bufs = [upload(&stream, &inputs[0]), upload(&stream, &inputs[1])];
                let addrs = bufs.each_ref().map(|b| device_addr(b, &stream));
                for atom in AtomKind::available_in(*arch) {
                    for layout in GridLayout::ALL {
                        let launch = Launch {
                            atom,
                            blocks: 2 * gpu.sm_count(),
                            layout,
                        };
                        // SAFETY: every buffer holds `count` elements and outlives the synchronisation.
                        unsafe { reduction.check(gpu, &stream, launch, &addrs) };
                        ran += 1;
                    }
                }
            }
        }
    }
    println!("atom 256 MiB reduce cases run: {ran}");
}

#[test]
fn fused_kernel_does_its_own_work_then_calls_the_atom_copy() {
    let gpu = gpu_or_return!("fused kernel");
    let stream = gpu.new_stream().unwrap();
    let mut rng = fresh_rng("fused kernel");
    let native = AtomKind::ALL
        .into_iter()
        .rev()
        .find(|a| a.arch() <= gpu.arch())
        .unwrap();
    for count in [0usize, 1, 5, 4099, (1 << 22) + 3] {
        let src: Vec<f32> = (0..count)
            .map(|_| rng.random_range(-100.0f32..100.0))
            .collect();
        let scale = rng.random_range(0.5f32..2.0);
        let src_d = if count == 0 {
            stream.alloc_zeros::<f32>(4).unwrap()
        } else {
            stream.clone_htod(&src).unwrap()
        };
        let scratch = stream.alloc_zeros::<f32>(count.max(4)).unwrap();
        let dst = stream.clone_htod(&vec![f32::NAN; count.max(4)]).unwrap();
        let f = gpu
            .function("purlin_test_fused_scale_copy", native.smem_bytes())
            .unwrap();
        let (d, s, x, n) = (
            device_addr(&dst, &stream),
            device_addr(&scratch, &stream),
            device_addr(&src_d, &stream),
            count as u64,
        );
        let cfg = LaunchConfig {
            grid_dim: (gpu.sm_count(), 1, 1),
            block_dim: (native.threads(), 1, 1),
            shared_mem_bytes: native.smem_bytes(),
        };
        let mut launch = stream.launch_builder(&f);
        launch.arg(&d).arg(&s).arg(&x).arg(&n).arg(&scale);
        // SAFETY: arguments match the kernel; buffers hold `count` f32 and outlive the sync.
        unsafe { launch.launch(cfg) }.unwrap();
        let mut got = stream.clone_dtoh(&dst).unwrap();
        got.truncate(count);
        let want: Vec<f32> = src.iter().map(|v| v * scale).collect();
        assert!(got == want, "fused scale+copy of {count} f32 differs");
    }
    println!("fused kernel cases run: 5");
}
