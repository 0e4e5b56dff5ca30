//! 02 — Fusing a collective into your own kernel.
//!
//! The kernel `example_scale_then_all_gather` (crate `examples/fused-kernel`, built to PTX by
//! this package's build script with `purlin-builder`) does its own work — it scales the rank's
//! input into its send buffer — and then runs Purlin's AllGather in the same kernel. On a GPU it
//! runs on the virtual node (every rank a thread of this process, one stream each, all on
//! GPU 0); without one, the same Rust function runs on the CPU emulation.
//!
//! `cargo run --example fused_all_gather [ranks] [count]`

use purlin::bootstrap::{Bootstrap, InProcess};
use purlin::collective::{CollectiveKind, Options};
use purlin::memory::DeviceAllocator;
use purlin::module::Module;
use purlin::purlin_device::snac::SnacArgs;
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin::{Context, Gpu};

const SCALE: f32 = 0.5;

/// What rank `rank` starts from: distinct values per rank and element.
fn input(rank: u32, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| (rank as usize * 1000 + i % 1000) as f32)
        .collect()
}

/// Every rank's output must hold every rank's scaled input, in rank order.
fn verify(world: u32, count: usize, out: &[f32]) -> Result<(), String> {
    for p in 0..world {
        let want = input(p, count);
        for (i, w) in want.iter().enumerate() {
            let got = out[p as usize * count + i];
            if got != w * SCALE {
                return Err(format!(
                    "part {p} element {i}: {got}, expected {}",
                    w * SCALE
                ));
            }
        }
    }
    Ok(())
}

/// 1. On the GPU: load the kernel crate's PTX, then one thread per rank.
fn on_gpu(gpu: std::sync::Arc<Gpu>, world: u32, count: usize) -> purlin::Result<()> {
    let module = Module::load(&gpu, purlin_examples::fused_kernel_ptx(gpu.arch()))?;
    let (threads, smem) = purlin::collective::kernel_shape(gpu.arch());
    std::thread::scope(|s| -> purlin::Result<()> {
        let handles: Vec<_> = InProcess::group(world)?
            .into_iter()
            .map(|b| {
                let (gpu, module) = (gpu.clone(), &module);
                s.spawn(move || -> purlin::Result<()> {
                    // 2. This rank's stream, workspace and context.
                    let stream = gpu.new_stream()?;
                    let ws = Workspace::new(
                        &b,
                        DeviceAllocator::new(gpu.clone()),
                        WorkspaceRequirements::small(),
                    )?;
                    let ctx = Context::new(b.rank(), b.world(), ws, &stream)?;
                    // 3. Buffers: input, send buffer (the kernel writes it), output, barrier.
                    let input_d = stream.clone_htod(&input(b.rank(), count))?;
                    let send = stream.alloc_zeros::<f32>(count.max(4))?;
                    let dst = stream.alloc_zeros::<f32>((count * world as usize).max(4))?;
                    let barrier = stream.alloc_zeros::<u32>(2)?;
                    let addr = |span: purlin::memory::Span| span.addr;
                    use purlin::memory::Span;
                    let (input_a, send_a, dst_a, barrier_a) = (
                        addr(Span::from_device(&input_d, &stream)),
                        addr(Span::from_device(&send, &stream)),
                        addr(Span::from_device(&dst, &stream)),
                        addr(Span::from_device(&barrier, &stream)),
                    );
                    // 4. The tuned launch shape and plan of this AllGather, then the launch.
                    let bytes = 4 * count as u64;
                    let (mut shape, plan) =
                        ctx.plan(CollectiveKind::AllGather, bytes, &Options::default())?;
                    (shape.threads, shape.smem_bytes) = (threads, smem);
                    let mut args =
                        SnacArgs::new(dst_a as *mut u8, send_a as *const u8, bytes, shape.blocks);
                    args.plan = plan;
                    // SAFETY: the kernel takes (SnacArgs, Context, *const f32, u64, f32, *mut u32);
                    // every buffer lives until the synchronisation below.
                    unsafe {
                        module.launch(
                            &stream,
                            "example_scale_then_all_gather",
                            shape,
                            (
                                args,
                                ctx.device_view(),
                                input_a,
                                count as u64,
                                SCALE,
                                barrier_a,
                            ),
                        )?
                    };
                    // 5. Wait (a peer that never came would surface here as Error::Timeout).
                    ctx.synchronize()?;
                    let out = stream.clone_dtoh(&dst)?;
                    verify(world, count, &out).map_err(|e| {
                        purlin::Error::InvalidLaunch(format!("rank {}: {e}", b.rank()))
                    })?;
                    ctx.finalize()
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("rank thread panicked"))
    })
}

/// 1'. On the CPU emulation: the same function, one thread per (rank, block).
fn on_cpu(world: u32, count: usize) -> Result<(), String> {
    use purlin::purlin_device::atom::Host;
    use purlin::purlin_device::emulation::{Buffer, Communicator};
    let comm = Communicator::builder(world)
        .build()
        .map_err(|e| e.to_string())?;
    let blocks = 2;
    let inputs: Vec<Buffer> = (0..world)
        .map(|r| Buffer::from_slice(&input(r, count)))
        .collect();
    let sends: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(4 * count)).collect();
    let dsts: Vec<Buffer> = (0..world)
        .map(|_| Buffer::zeroed(4 * count * world as usize))
        .collect();
    let barriers: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(8)).collect();
    comm.launch(blocks, None, |rank, block, ctx, smem| {
        let r = rank as usize;
        let mut args = SnacArgs::new(
            dsts[r].as_mut_ptr(),
            sends[r].as_ptr(),
            4 * count as u64,
            blocks,
        );
        (args.block, args.smem) = (block, smem);
        // SAFETY: every buffer holds what the call needs and outlives the launch.
        unsafe {
            purlin_example_kernels::scale_then_all_gather::<Host>(
                args,
                &ctx,
                inputs[r].as_ptr() as *const f32,
                count as u64,
                SCALE,
                barriers[r].as_mut_ptr() as *mut u32,
            )
        };
    })
    .map_err(|e| e.to_string())?;
    for (r, d) in dsts.iter().enumerate() {
        verify(world, count, &d.as_slice::<f32>()).map_err(|e| format!("rank {r}: {e}"))?;
    }
    Ok(())
}

fn main() {
    purlin_examples::init_logging();
    let mut args = std::env::args().skip(1);
    let world: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4);
    let count: usize = args
        .next()
        .and_then(|s| purlin_examples::parse_size(&s))
        .unwrap_or(1 << 16) as usize;
    match Gpu::open(0) {
        Ok(gpu) => {
            println!(
                "fused scale + AllGather: {world} ranks on GPU 0 ({}), {count} f32 per rank",
                gpu.name()
            );
            match on_gpu(gpu, world, count) {
                Ok(()) => println!("OK: every rank holds every rank's scaled input"),
                Err(e) => {
                    eprintln!("FAILED: {e}");
                    std::process::exit(1);
                }
            }
        }
        Err(why) => {
            println!(
                "no GPU ({why}): running the same kernel code on the CPU emulation, {world} ranks, {count} f32 per rank"
            );
            match on_cpu(world, count) {
                Ok(()) => {
                    println!("OK (CPU emulation): every rank holds every rank's scaled input")
                }
                Err(e) => {
                    eprintln!("FAILED: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
