//! 03 — Host-launched AllReduce (the main demo).
//!
//! Every rank sums its f32 buffer with every other rank's. On a GPU the ranks form a virtual
//! node: threads of this process, one stream each, all on GPU 0, communicating through each
//! other's device memory exactly as ranks on separate GPUs would over NVLink. Without a GPU the
//! same protocol runs on the CPU emulation. Either way the result is checked bit for bit against
//! an f32 rank-order sum computed here.
//!
//! `cargo run --release --example all_reduce [ranks] [bytes]`

use purlin::bootstrap::{Bootstrap, InProcess};
use purlin::memory::DeviceAllocator;
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin::{Context, Gpu, ReduceOpKind};
use std::time::Instant;

/// Rank `rank`'s input: small integers and halves, so the sum is exact in f32.
fn input(rank: u32, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| ((i * 7 + rank as usize * 3) % 64) as f32 * 0.5)
        .collect()
}

/// The expected result: element by element, in rank order, in f32.
fn expected(world: u32, count: usize) -> Vec<f32> {
    let mut acc = input(0, count);
    for r in 1..world {
        for (a, x) in acc.iter_mut().zip(input(r, count)) {
            *a += x;
        }
    }
    acc
}

/// 1. On the GPU: one thread per rank, each with its stream, workspace and context.
fn on_gpu(gpu: std::sync::Arc<Gpu>, world: u32, count: usize) -> purlin::Result<f64> {
    let want = expected(world, count);
    std::thread::scope(|s| -> purlin::Result<f64> {
        let handles: Vec<_> = InProcess::group(world)?
            .into_iter()
            .map(|b| {
                let (gpu, want) = (gpu.clone(), &want);
                s.spawn(move || -> purlin::Result<f64> {
                    let stream = gpu.new_stream()?;
                    let ws = Workspace::new(
                        &b,
                        DeviceAllocator::new(gpu.clone()),
                        WorkspaceRequirements::default(),
                    )?;
                    let ctx = Context::new(b.rank(), b.world(), ws, &stream)?;
                    let src = stream.clone_htod(&input(b.rank(), count))?;
                    let mut dst = stream.alloc_zeros::<f32>(count)?;
                    // 2. Warm up (module load, first touch), then time ten calls.
                    purlin::all_reduce(&ctx, &src, &mut dst, count, ReduceOpKind::Sum)?;
                    ctx.synchronize()?;
                    let start = Instant::now();
                    for _ in 0..10 {
                        purlin::all_reduce(&ctx, &src, &mut dst, count, ReduceOpKind::Sum)?;
                    }
                    ctx.synchronize()?;
                    let us = start.elapsed().as_secs_f64() * 1e6 / 10.0;
                    // 3. Check every element.
                    let got = stream.clone_dtoh(&dst)?;
                    if let Some(i) = (0..count).find(|&i| got[i].to_bits() != want[i].to_bits()) {
                        return Err(purlin::Error::InvalidLaunch(format!(
                            "rank {} element {i}: {} != {}",
                            b.rank(),
                            got[i],
                            want[i]
                        )));
                    }
                    ctx.finalize()?;
                    Ok(us)
                })
            })
            .collect();
        let times: Vec<f64> = handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect::<purlin::Result<_>>()?;
        Ok(times.into_iter().fold(0.0, f64::max))
    })
}

/// 1'. On the CPU emulation: the same device code, one thread per (rank, block).
fn on_cpu(world: u32, count: usize) -> Result<(), String> {
    use purlin::purlin_device::collective::CollectiveKind;
    use purlin::purlin_device::emulation::{Buffer, Communicator, Launch};
    let comm = Communicator::builder(world)
        .build()
        .map_err(|e| e.to_string())?;
    let src: Vec<Buffer> = (0..world)
        .map(|r| Buffer::from_slice(&input(r, count)))
        .collect();
    let dst: Vec<Buffer> = (0..world).map(|_| Buffer::zeroed(4 * count)).collect();
    let launch = Launch::new(CollectiveKind::AllReduce, 4 * count as u64)
        .typed(purlin::DataType::F32, ReduceOpKind::Sum);
    comm.run(&launch, &src, &dst, None)
        .map_err(|e| e.to_string())?;
    let want = expected(world, count);
    for (r, d) in dst.iter().enumerate() {
        let got = d.as_slice::<f32>();
        if let Some(i) = (0..count).find(|&i| got[i].to_bits() != want[i].to_bits()) {
            return Err(format!("rank {r} element {i}: {} != {}", got[i], want[i]));
        }
    }
    Ok(())
}

fn main() {
    purlin_examples::init_logging();
    let mut args = std::env::args().skip(1);
    let world: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let bytes = args
        .next()
        .and_then(|s| purlin_examples::parse_size(&s))
        .unwrap_or(64 << 20);
    match Gpu::open(0) {
        Ok(gpu) => {
            let count = (bytes / 4) as usize;
            println!(
                "AllReduce (sum, f32) of {bytes} bytes per rank, {world} ranks on GPU 0 ({}), the virtual node",
                gpu.name()
            );
            match on_gpu(gpu, world, count) {
                Ok(us) => println!(
                    "OK: every rank holds the exact rank-order sum; {us:.1} us per AllReduce (slowest rank, mean of 10)"
                ),
                Err(e) => {
                    eprintln!("FAILED: {e}");
                    std::process::exit(1);
                }
            }
        }
        Err(why) => {
            // The CPU emulation runs a thread per (rank, block): keep the demo small there.
            let count = ((bytes / 4) as usize).min(1 << 20);
            println!(
                "no GPU ({why}): running on the CPU emulation instead, {world} ranks, {} bytes per rank",
                4 * count
            );
            match on_cpu(world, count) {
                Ok(()) => println!("OK (CPU emulation): every rank holds the exact rank-order sum"),
                Err(e) => {
                    eprintln!("FAILED: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
