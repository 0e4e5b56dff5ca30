//! # 01 — point to point
//!
//! Rank 0 copies a buffer straight into rank 1's memory — an Atom copy whose destination is a
//! peer's address — then signals (a release store into rank 1's signal word, ordered after the
//! copy on rank 0's stream). Rank 1 waits for the signal (bounded: a missing rank is an error,
//! not a hang) and verifies every byte.
//!
//! ```text
//! cargo run --example p2p [bytes]          # two ranks as threads: on GPUs 0 and 1 if there
//!                                          # are two, else both on GPU 0 (the virtual node);
//!                                          # on a machine without a GPU, the CPU path
//! cargo build --example p2p --features mpi
//! mpirun -n 2 target/debug/examples/p2p    # one process per rank (CUDA IPC between them)
//! ```
//!
//! `bytes` takes K/M/G suffixes (default 64M).

use purlin::bootstrap::{Bootstrap, InProcess};
use purlin::memory::{Allocator, DeviceAllocator, HostAllocator, Span};
use purlin::p2p::Window;
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin::{Context, Error, Gpu, Result};
use purlin_examples::{HostBuffer, pattern};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long rank 1 waits for rank 0's signal.
const WAIT: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    purlin_examples::init_logging();
    let bytes = match std::env::args().nth(1) {
        None => 64 << 20,
        Some(a) => match purlin_examples::parse_size(&a) {
            Some(b) => b,
            None => {
                eprintln!("usage: p2p [bytes with an optional K/M/G suffix]");
                return ExitCode::from(2);
            }
        },
    };
    match run(bytes) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("p2p failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(bytes: u64) -> Result<()> {
    if purlin_examples::launched_by_mpirun() {
        return run_mpi(bytes);
    }
    let gpus = Gpu::count()?;
    if gpus == 0 {
        let why = if Gpu::driver_present() {
            "the driver reports no GPU"
        } else {
            "no NVIDIA driver"
        };
        println!("no GPU here ({why}): running the CPU path (host memory, two threads)");
        let ranks = InProcess::group(2)?;
        return in_threads(ranks, |b| {
            rank_main(b, Arc::new(HostAllocator::new()), bytes)
        });
    }
    let ordinals = if gpus >= 2 { [0, 1] } else { [0, 0] };
    println!(
        "two ranks as threads on {}",
        if gpus >= 2 {
            "GPUs 0 and 1 (peer access)".to_string()
        } else {
            "GPU 0 (the virtual node)".to_string()
        }
    );
    let ranks = InProcess::group(2)?;
    in_threads(ranks, |b| {
        let gpu = Gpu::open(ordinals[b.rank() as usize])?;
        rank_main(b, Arc::new(DeviceAllocator::new(gpu)), bytes)
    })
}

#[cfg(feature = "mpi")]
fn run_mpi(bytes: u64) -> Result<()> {
    let mpi = purlin::bootstrap::Mpi::init()?;
    if Gpu::count()? == 0 {
        if mpi.rank() == 0 {
            println!("no GPU here: the MPI path needs GPU memory (CUDA IPC); nothing to run");
        }
        return Ok(());
    }
    if mpi.world() < 2 {
        return Err(Error::InvalidArgument {
            what: "world",
            reason: "run with at least two ranks: mpirun -n 2".into(),
        });
    }
    let gpu = Gpu::open(mpi.local_device()?)?;
    println!(
        "rank {} of {} (MPI) on GPU {} ({})",
        mpi.rank(),
        mpi.world(),
        gpu.ordinal(),
        gpu.name()
    );
    rank_main(mpi, Arc::new(DeviceAllocator::new(gpu)), bytes)
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_: u64) -> Result<()> {
    Err(Error::Unsupported(
        "started by mpirun, but built without the `mpi` feature: \
         cargo build --example p2p --features mpi"
            .into(),
    ))
}

/// Runs `f` for each rank on its own thread; the first error wins.
fn in_threads(ranks: Vec<InProcess>, f: impl Fn(InProcess) -> Result<()> + Sync) -> Result<()> {
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = ranks.into_iter().map(|b| s.spawn(move || f(b))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Bootstrap("a rank panicked".into())))
            })
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(())
}

/// One rank: make the context and a window, then send (rank 0) or receive (rank 1).
fn rank_main<B: Bootstrap + Clone + 'static>(
    bootstrap: B,
    allocator: Arc<dyn Allocator>,
    bytes: u64,
) -> Result<()> {
    let (rank, world) = (bootstrap.rank(), bootstrap.world());
    // Small staging: the example moves data through its own window, not the staging.
    let requirements = WorkspaceRequirements::small();
    let gpu = allocator.gpu()?;
    let workspace = Workspace::with_shared(Arc::new(bootstrap.clone()), allocator, requirements)?;
    let ctx = match &gpu {
        Some(gpu) => Context::new(rank, world, workspace, &gpu.new_stream()?)?,
        None => Context::new_host(rank, world, workspace)?,
    };
    // Every rank allocates the window (a collective call); rank 1's is the destination.
    let window = Window::new(&ctx, bytes)?;
    let result = match rank {
        0 => send(&ctx, &window, bytes),
        1 => receive(&ctx, &window, bytes),
        _ => Ok(()),
    };
    // Tear down together even if this rank failed (the peers are waiting to).
    let done = window.finalize().and(ctx.finalize());
    result.and(done)
}

fn send(ctx: &Context, window: &Window, bytes: u64) -> Result<()> {
    let start = Instant::now();
    match ctx.stream() {
        Some(stream) => {
            let mut host = HostBuffer::with_pattern(bytes as usize);
            let src = stream.clone_htod(host.bytes_mut())?;
            // SAFETY: `src` holds `bytes` bytes of this GPU and lives until the stream is
            // synchronised below.
            unsafe { window.put(ctx, 1, 0, Span::from_device(&src, stream))? };
            window.signal(ctx, 1, 1)?;
            ctx.synchronize()?;
        }
        None => {
            let host = HostBuffer::with_pattern(bytes as usize);
            // SAFETY: `host` holds `bytes` bytes and outlives the (synchronous) put.
            unsafe { window.put(ctx, 1, 0, Span::new(host.addr(), bytes))? };
            window.signal(ctx, 1, 1)?;
        }
    }
    println!(
        "rank 0: put {bytes} bytes into rank 1's window and signalled ({:.3} ms)",
        start.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

fn receive(ctx: &Context, window: &Window, bytes: u64) -> Result<()> {
    let start = Instant::now();
    window.wait(ctx, 0, 1, WAIT)?;
    let waited = start.elapsed();
    let mut got = vec![0u8; bytes as usize];
    window.read_local(ctx, 0, &mut got)?;
    let wrong = got
        .iter()
        .enumerate()
        .filter(|(i, b)| **b != pattern(*i as u64))
        .count();
    if wrong > 0 {
        return Err(Error::InvalidArgument {
            what: "received data",
            reason: format!("{wrong} of {bytes} bytes differ from what rank 0 sent"),
        });
    }
    println!(
        "rank 1: signal after {:.3} ms; all {bytes} bytes verified",
        waited.as_secs_f64() * 1e3
    );
    Ok(())
}
