//! Atom datapath benchmark: every Atom of the device's PTX copying 1 GiB and reducing eight
//! 64 MiB bf16 inputs into one, beside `cuMemcpyDtoD` of the same size measured in the same
//! run. Prints a Markdown table (medians of `--runs` timed launches, CUDA events).
//!
//! Bandwidth counts bytes read plus bytes written: a copy of N bytes moves 2N, an 8-to-1 reduce
//! of N-byte inputs moves 9N.

use clap::Parser;
use cudarc::driver::{CudaSlice, CudaStream, sys};
use purlin::atom::{self, AtomKind, GridLayout, Launch};
use purlin::{DataType, Gpu, ReduceOpKind};
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(about = "Benchmark Purlin's Atom copy and reduce against cuMemcpyDtoD")]
struct Args {
    /// Bytes per copy.
    #[arg(long, default_value_t = 1 << 30)]
    copy_bytes: usize,
    /// Bytes per reduce input.
    #[arg(long, default_value_t = 64 << 20)]
    reduce_bytes: usize,
    /// Reduce sources.
    #[arg(long, default_value_t = 8)]
    sources: usize,
    /// Timed launches per measurement (the median is reported).
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    device: usize,
}

/// Median milliseconds of `runs` launches of `f`, each timed with its own pair of events,
/// after three warm-up launches.
fn time_ms(stream: &Arc<CudaStream>, runs: usize, mut f: impl FnMut()) -> f64 {
    let ctx = stream.context();
    for _ in 0..3 {
        f();
    }
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .unwrap();
            let end = ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                .unwrap();
            start.record(stream).unwrap();
            f();
            end.record(stream).unwrap();
            end.synchronize().unwrap();
            start.elapsed_ms(&end).unwrap() as f64
        })
        .collect();
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    times[times.len() / 2]
}

fn addr(buf: &CudaSlice<u8>, stream: &CudaStream) -> u64 {
    use cudarc::driver::DevicePtr;
    buf.device_ptr(stream).0
}

/// Full waves of `atom` on this GPU: resident blocks per SM × SMs, times `waves`.
fn grid(gpu: &Gpu, atom: AtomKind, kernel: &str, waves: u32) -> u32 {
    let f = gpu.function(kernel, atom.smem_bytes()).unwrap();
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(
            atom.threads(),
            atom.smem_bytes() as usize,
            None,
        )
        .unwrap_or(1)
        .max(1);
    per_sm * gpu.sm_count() * waves
}

/// Times `run` for every Atom of the GPU's PTX, at 1, 2 and 4 full waves and both layouts,
/// and prints one table row each. `kernel` is the kernel name after `purlin_atom_`, with `%`
/// standing for the Atom (it sizes the waves by that kernel's occupancy).
#[allow(clippy::too_many_arguments)]
fn sweep(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    runs: usize,
    label: &str,
    kernel: &str,
    moved: f64,
    memcpy_tbs: f64,
    run: impl Fn(Launch),
) {
    for atom in AtomKind::available_in(gpu.arch()) {
        let name = if kernel.contains('%') {
            format!("purlin_atom_{}", kernel.replace('%', atom.name()))
        } else {
            format!("purlin_atom_{kernel}_{}", atom.name())
        };
        for (waves, layout) in [1, 2, 4]
            .into_iter()
            .flat_map(|w| GridLayout::ALL.map(|l| (w, l)))
        {
            let launch = Launch {
                atom,
                blocks: grid(gpu, atom, &name, waves),
                layout,
            };
            let ms = time_ms(stream, runs, || run(launch));
            let tbs = moved / ms / 1e9;
            println!(
                "| {label} | {} | {} | {layout:?} | {} | {:.1} | {:.3} | {:.3} |",
                atom.name(),
                launch.blocks,
                moved as u64,
                ms * 1e3,
                tbs,
                tbs / memcpy_tbs
            );
        }
    }
}

fn main() -> Result<(), purlin::Error> {
    let args = Args::parse();
    let gpu = match Gpu::open(args.device) {
        Ok(g) => g,
        Err(e) => {
            println!("SKIPPED: atom benchmark needs a GPU: {e}");
            return Ok(());
        }
    };
    let stream = gpu.new_stream()?;
    println!(
        "# Atom benchmark on {} ({} SMs, {} PTX)\n",
        gpu.name(),
        gpu.sm_count(),
        gpu.arch()
    );
    println!(
        "| operation | Atom | blocks | layout | bytes moved | median time (us) | TB/s | vs cuMemcpyDtoD |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");

    // Copy: non-zero data so nothing is special-cased.
    let n = args.copy_bytes;
    let src = stream.clone_htod(&(0..n).map(|i| (i * 31 + 7) as u8).collect::<Vec<u8>>())?;
    let dst = stream.alloc_zeros::<u8>(n)?;
    let (s, d) = (addr(&src, &stream), addr(&dst, &stream));
    let moved = 2.0 * n as f64;
    let memcpy_ms = time_ms(&stream, args.runs, || {
        // SAFETY: both allocations hold `n` bytes.
        unsafe { cudarc::driver::result::memcpy_dtod_async(d, s, n, stream.cu_stream()) }.unwrap();
    });
    let memcpy_tbs = moved / memcpy_ms / 1e9;
    println!(
        "| copy {} MiB | cuMemcpyDtoD | - | - | {} | {:.1} | {:.3} | 1.000 |",
        n >> 20,
        2 * n,
        memcpy_ms * 1e3,
        memcpy_tbs
    );
    let label = format!("copy {} MiB", n >> 20);
    sweep(
        &gpu,
        &stream,
        args.runs,
        &label,
        "copy",
        moved,
        memcpy_tbs,
        |launch| {
            // SAFETY: both allocations hold `n` bytes.
            unsafe { atom::copy(&gpu, &stream, launch, d, s, n as u64) }.unwrap();
        },
    );
    drop((src, dst));

    // Reduce: bf16 inputs of small integers and halves (exactly representable sums).
    let (k, bytes) = (args.sources, args.reduce_bytes);
    let count = bytes / 2;
    let inputs: Vec<CudaSlice<u8>> = (0..k)
        .map(|j| {
            let host: Vec<u8> = (0..count)
                .flat_map(|i| {
                    half::bf16::from_f32(((i * 7 + j * 3) % 17) as f32 * 0.5)
                        .to_bits()
                        .to_le_bytes()
                })
                .collect();
            stream.clone_htod(&host)
        })
        .collect::<Result<_, _>>()?;
    let out = stream.alloc_zeros::<u8>(bytes)?;
    let srcs: Vec<u64> = inputs.iter().map(|b| addr(b, &stream)).collect();
    let o = addr(&out, &stream);
    let moved = ((k + 1) * bytes) as f64;
    let label = format!("bf16 {k}-to-1 reduce, {} MiB inputs", bytes >> 20);
    sweep(
        &gpu,
        &stream,
        args.runs,
        &label,
        "reduce_%_bfloat16",
        moved,
        memcpy_tbs,
        |launch| {
            // SAFETY: every allocation holds `count` bf16.
            unsafe {
                atom::reduce(
                    &gpu,
                    &stream,
                    launch,
                    DataType::Bf16,
                    ReduceOpKind::Sum,
                    o,
                    &srcs,
                    count as u64,
                )
            }
            .unwrap();
        },
    );
    Ok(())
}
