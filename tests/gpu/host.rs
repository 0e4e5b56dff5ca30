//! The host shim on a GPU: the virtual node (world 2, 4, 8 on GPU 0) creating and destroying
//! contexts and windows 100 times without leaking device memory; point-to-point puts of 1 B to
//! 256 MiB with every Atom; the same across two GPUs when present; typed launches and the
//! architecture choice; device checks of `Context::new`.

use purlin::atom::AtomKind;
use purlin::bootstrap::{Bootstrap, InProcess, run_in_process};
use purlin::launch::{Kernel, LaunchShape};
use purlin::memory::{DeviceAllocator, HostAllocator, Span};
use purlin::p2p::Window;
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin::{Context, Error, Gpu};
use purlin_tests::device_addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const REQ: WorkspaceRequirements = WorkspaceRequirements {
    staging_half_bytes: 8 << 20,
    latency_window_bytes: 256 << 10,
};
const WAIT: Duration = Duration::from_secs(60);

fn pattern(i: usize, salt: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9) ^ salt) as u8
}

fn free_memory(gpu: &Gpu) -> usize {
    gpu.context().bind_to_thread().unwrap();
    gpu.context().mem_get_info().unwrap().0
}

/// One rank of the virtual node: workspace, context on its own stream, a window; torn down by
/// `finalize` or by drop.
fn make_and_destroy(gpu: &Arc<Gpu>, b: &InProcess, by_drop: bool) -> purlin::Result<()> {
    let stream = gpu.new_stream()?;
    let ws = Workspace::new(b, DeviceAllocator::new(gpu.clone()), REQ)?;
    let ctx = Context::new(b.rank(), b.world(), ws, &stream)?;
    let window = Window::new(&ctx, 1 << 20)?;
    ctx.synchronize()?; // reads the (empty) fault record from device memory
    if by_drop {
        drop(window);
        drop(ctx);
        Ok(())
    } else {
        window.finalize()?;
        ctx.finalize()
    }
}

#[test]
fn virtual_node_contexts_created_and_destroyed_100_times_leak_nothing() {
    let gpu = gpu_or_return!("virtual node lifecycle");
    for world in [2u32, 4, 8] {
        // Warm up (module load, streams, allocator pools) before measuring.
        run_in_process(world, |b| make_and_destroy(&gpu, &b, false)).unwrap();
        let before = free_memory(&gpu);
        let start = Instant::now();
        for i in 0..100 {
            run_in_process(world, |b| make_and_destroy(&gpu, &b, i % 2 == 1)).unwrap();
        }
        let after = free_memory(&gpu);
        let per_rank = REQ.bytes_per_rank(world).unwrap();
        println!(
            "world {world}: 100 create/destroy cycles in {:.2} s; free memory {} -> {} bytes ({} B workspace per rank)",
            start.elapsed().as_secs_f64(),
            before,
            after,
            per_rank
        );
        // The driver hands memory out in 2 MiB pages; anything beyond one page is a leak.
        assert!(
            after + (2 << 20) >= before,
            "world {world}: {} bytes of device memory leaked over 100 cycles",
            before - after
        );
    }
}

/// Rank 0 puts `sizes` into rank 1's window (each size at offset 0, one signal per size), with
/// `atoms` (or the native Atom); rank 1 waits, then verifies. Returns how many transfers were
/// verified.
fn p2p_two_ranks(
    gpus: [Arc<Gpu>; 2],
    sizes: &[usize],
    atoms: &[Option<AtomKind>],
    stream_wait: bool,
) -> usize {
    let window_bytes = *sizes.iter().max().unwrap() as u64;
    let verified = run_in_process(2, |b| {
        let gpu = gpus[b.rank() as usize].clone();
        let stream = gpu.new_stream()?;
        let ws = Workspace::new(&b, DeviceAllocator::new(gpu.clone()), REQ)?;
        let ctx = Context::new(b.rank(), 2, ws, &stream)?;
        let window = Window::new(&ctx, window_bytes)?;
        let mut count = 0;
        let mut seq = 0u64;
        for &atom in atoms {
            for (i, &bytes) in sizes.iter().enumerate() {
                seq += 1;
                let salt = i + 7 * seq as usize;
                if b.rank() == 0 {
                    let data: Vec<u8> = (0..bytes).map(|j| pattern(j, salt)).collect();
                    let src = stream.clone_htod(&data)?;
                    // SAFETY: `src` holds `bytes` bytes and lives until the synchronisation.
                    unsafe {
                        window.put_with(&ctx, 1, 0, Span::from_device(&src, &stream), atom, None)?
                    };
                    window.signal(&ctx, 1, seq)?;
                    ctx.synchronize()?;
                } else {
                    if stream_wait {
                        // Stream-ordered and bounded by the context's timeout.
                        window.wait_on_stream(&ctx, 0, seq)?;
                    }
                    window.wait(&ctx, 0, seq, WAIT)?;
                    let mut got = vec![0u8; bytes];
                    window.read_local(&ctx, 0, &mut got)?;
                    let wrong = got
                        .iter()
                        .enumerate()
                        .filter(|(j, x)| **x != pattern(*j, salt))
                        .count();
                    assert_eq!(wrong, 0, "{bytes} B with {atom:?}: {wrong} bytes wrong");
                    count += 1;
                }
                // Rank 0 does not overwrite the window before rank 1 has read it.
                b.barrier()?;
            }
        }
        window.finalize()?;
        ctx.finalize()?;
        Ok(count)
    })
    .unwrap();
    verified[1]
}

const P2P_SIZES: [usize; 9] = [
    1,
    15,
    16,
    17,
    4095,
    65536 + 48,
    (1 << 20) + 13,
    64 << 20,
    256 << 20,
];

#[test]
fn virtual_node_p2p_1_byte_to_256_mib() {
    let gpu = gpu_or_return!("virtual node p2p");
    let n = p2p_two_ranks([gpu.clone(), gpu.clone()], &P2P_SIZES, &[None], false);
    println!("virtual node p2p: {n} transfers verified (native Atom, host wait)");
    // Every Atom this GPU runs, small and mid sizes, stream-ordered wait.
    let atoms: Vec<Option<AtomKind>> = AtomKind::available_in(gpu.arch()).map(Some).collect();
    let n = p2p_two_ranks([gpu.clone(), gpu], &P2P_SIZES[..7], &atoms, true);
    println!("virtual node p2p: {n} transfers verified (every Atom, stream wait)");
}

#[test]
fn two_gpus_p2p_when_present() {
    let gpu0 = gpu_or_return!("two-GPU p2p");
    let gpu1 = match Gpu::open(1) {
        Ok(g) => g,
        Err(e) => {
            println!("SKIPPED: two-GPU p2p: {e}");
            return;
        }
    };
    let n = p2p_two_ranks([gpu0, gpu1], &P2P_SIZES, &[None], false);
    println!("two-GPU p2p: {n} transfers verified");
}

#[test]
fn typed_launch_and_architecture_choice() {
    let gpu = gpu_or_return!("typed launch");
    // The original's ARCH values: the device's own loads (cached: the module is already
    // loaded), newer ones are refused before anything is loaded. (Older ones load their PTX
    // through the driver's JIT, which the Atom tests exercise.)
    let cc = gpu.compute_capability();
    let native = match gpu.arch().compute_capability() {
        70 => Gpu::open_for::<700>(0),
        80 => Gpu::open_for::<800>(0),
        90 => Gpu::open_for::<900>(0),
        _ => Gpu::open_for::<1000>(0),
    };
    assert!(Arc::ptr_eq(&native.unwrap(), &gpu));
    if cc < 100 {
        assert!(matches!(
            Gpu::open_for::<1000>(0),
            Err(Error::ArchUnsupported { .. })
        ));
    }
    if cc < 90 {
        assert!(matches!(
            Gpu::open_for::<900>(0),
            Err(Error::ArchUnsupported { .. })
        ));
    }
    // A typed launch of an Atom copy kernel.
    // SAFETY: purlin_atom_copy_sm70(dst: *mut u8, src: *const u8, bytes: u64, layout: u32).
    const COPY: Kernel<(u64, u64, u64, u32)> = unsafe { Kernel::new("purlin_atom_copy_sm70") };
    let stream = gpu.new_stream().unwrap();
    let data: Vec<u8> = (0..100_000).map(|j| pattern(j, 3)).collect();
    let src = stream.clone_htod(&data).unwrap();
    let dst = stream.alloc_zeros::<u8>(data.len()).unwrap();
    let shape = LaunchShape::for_atom(AtomKind::Sm70, 3);
    // SAFETY: both buffers hold 100 000 bytes and outlive the synchronisation.
    unsafe {
        COPY.launch(
            &gpu,
            &stream,
            shape,
            (
                device_addr(&dst, &stream),
                device_addr(&src, &stream),
                data.len() as u64,
                0,
            ),
        )
    }
    .unwrap();
    assert_eq!(stream.clone_dtoh(&dst).unwrap(), data);
    // A shape the device cannot run is refused before launching.
    let too_big = LaunchShape {
        blocks: 1,
        threads: 4096,
        smem_bytes: 0,
    };
    // SAFETY: refused.
    let e = unsafe { COPY.launch(&gpu, &stream, too_big, (0, 0, 0, 0)) };
    assert!(matches!(e, Err(Error::InvalidLaunch(_))));
    // A kernel that is not in the PTX.
    // SAFETY: refused (missing).
    const MISSING: Kernel<()> = unsafe { Kernel::new("purlin_no_such_kernel") };
    let e = unsafe {
        MISSING.launch(
            &gpu,
            &stream,
            LaunchShape {
                blocks: 1,
                threads: 32,
                smem_bytes: 0,
            },
            (),
        )
    };
    assert!(matches!(e, Err(Error::MissingKernel { .. })));
}

#[test]
fn context_new_checks_devices() {
    let gpu = gpu_or_return!("context device checks");
    let stream = gpu.new_stream().unwrap();
    // A host workspace with a GPU stream, and a device workspace as a host context.
    let b = InProcess::group(1).unwrap().remove(0);
    let host_ws = Workspace::new(&b, HostAllocator::new(), REQ).unwrap();
    assert!(matches!(
        Context::new(0, 1, host_ws, &stream),
        Err(Error::WrongDevice { .. })
    ));
    let dev_ws = Workspace::new(&b, DeviceAllocator::new(gpu.clone()), REQ).unwrap();
    assert!(matches!(
        Context::new_host(0, 1, dev_ws),
        Err(Error::WrongDevice { .. })
    ));
    // A stream of another GPU.
    if let Ok(gpu1) = Gpu::open(1) {
        let ws = Workspace::new(&b, DeviceAllocator::new(gpu.clone()), REQ).unwrap();
        let other = gpu1.new_stream().unwrap();
        assert!(matches!(
            Context::new(0, 1, ws, &other),
            Err(Error::WrongDevice { .. })
        ));
    }
    // Rank and world must be the bootstrap's.
    let ws = Workspace::new(&b, DeviceAllocator::new(gpu.clone()), REQ).unwrap();
    assert!(matches!(
        Context::new(0, 2, ws, &stream),
        Err(Error::WorldMismatch { .. })
    ));
    assert_eq!(b.world(), 1);
}

/// Opening a GPU leaves enough per-thread local memory for every collective and Atom kernel,
/// so no launch has to grow it (which waits for the whole GPU to go idle: a rank whose launch
/// did that while a peer's collective waited for it deadlocked until the timeout, H200 at
/// 672f8ae, the queued world-2 sequences in 5 runs of 6). Before the fix the stack limit stayed
/// at the driver's 1024 bytes, below the ReduceScatter kernels' 1056 and 1072.
#[test]
fn opening_a_gpu_reserves_the_local_memory_every_kernel_needs() {
    let gpu = gpu_or_return!("local memory reservation");
    gpu.load_atom_kernels().unwrap();
    let limit = gpu
        .context()
        .get_limit(cudarc::driver::sys::CUlimit::CU_LIMIT_STACK_SIZE)
        .unwrap();
    let mut checked = 0;
    for embedded in [
        purlin::ptx::kernels(gpu.arch()),
        purlin::ptx::atom_kernels(gpu.arch()),
    ] {
        // A second, independent load of what the library loaded (the precompiled cubin when
        // there is one, else the PTX), to read each kernel's need.
        let image = match purlin::ptx::precompiled(embedded) {
            Some(mut cubin) => {
                cubin.push(0);
                cudarc::nvrtc::Ptx::from_binary(cubin)
            }
            None => cudarc::nvrtc::Ptx::from_src(embedded.text()),
        };
        let module = gpu.context().load_module(image).unwrap();
        for name in embedded
            .text()
            .lines()
            .filter_map(|l| l.split(".entry ").nth(1))
            .map(|rest| rest.split(['(', ' ']).next().unwrap())
        {
            let need = module
                .load_function(name)
                .unwrap()
                .local_size_bytes()
                .unwrap() as usize;
            assert!(
                need <= limit,
                "{name} needs {need} bytes per thread, the stack limit is {limit}"
            );
            checked += 1;
        }
    }
    assert!(checked > 40, "only {checked} kernels found");
    println!("local memory: {checked} kernels checked against a {limit}-byte stack limit");
}
