//! `purlin-bench`: one Purlin collective over doubling sizes on the virtual node (or several
//! GPUs of this machine), printed as nccl-tests prints it, plus the roofline fraction.
//!
//! ```text
//! purlin-bench ar 8 256M 8 32 8 --ranks 8 --check --plot ar.png
//! purlin-bench ar 16 32K 20 50 8 --one-graph --csv     # latency as eight GPUs would see it
//! ```

use clap::Parser;
use purlin::collective::{Options, ReductionMode};
use purlin::{DataType, Gpu, ReduceOpKind};
use purlin_bench::args::Args;
use purlin_bench::report;
use purlin_bench::run::{self, Sweep};
use std::io::Write as _;

fn main() {
    let args = Args::parse();
    if let Err(e) = bench(&args) {
        eprintln!("purlin-bench: {e}");
        std::process::exit(1);
    }
}

fn bench(args: &Args) -> Result<(), String> {
    if args.min_bytes > args.max_bytes {
        return Err(format!(
            "minBytes {} is above maxBytes {}",
            args.min_bytes, args.max_bytes
        ));
    }
    let gpu = Gpu::open(0).map_err(|e| format!("needs a GPU: {e}"))?;
    let seed = if args.seed == 0 {
        rand_seed()
    } else {
        args.seed
    };
    eprintln!("# seed {seed}");
    let dtype: DataType = args.dtype.into();
    let op: ReduceOpKind = args.op.into();
    let sweep = Sweep {
        collective: args.collective,
        world: args.ranks,
        gpus: args.gpus,
        dtype,
        op,
        options: vec![Options {
            mode: if args.deterministic {
                ReductionMode::Deterministic
            } else {
                ReductionMode::Default
            },
            trace: args.trace,
            strict_order: args.strict_order,
            staged: args.staged,
            direct: args.direct,
            algorithm: args.algorithm.map(Into::into),
            ..Default::default()
        }],
        sizes: purlin_bench::sizes::doubling(args.min_bytes, args.max_bytes),
        graph_launches: args.graph_launches,
        runs: args.runs,
        warmup: args.warmup,
        seed,
        check: args.check,
        one_graph: args.one_graph,
        skew: args.skew,
        floor: true,
        symmetric: args.symmetric,
    };
    #[cfg(feature = "mpi")]
    let mpi = if args.mpi {
        Some(purlin::bootstrap::Mpi::init().map_err(|e| e.to_string())?)
    } else {
        None
    };
    if args.mpi && args.one_graph {
        return Err("--one-graph needs every rank in this process (not --mpi)".into());
    }
    #[cfg(not(feature = "mpi"))]
    if args.mpi {
        return Err("--mpi needs purlin-bench built with `--features mpi`".into());
    }
    #[cfg(feature = "mpi")]
    let (gpu, sweep) = match &mpi {
        Some(m) => {
            use purlin::bootstrap::Bootstrap;
            let gpu = Gpu::open(m.local_device().map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            (
                gpu,
                Sweep {
                    world: m.world(),
                    ..sweep
                },
            )
        }
        None => (gpu, sweep),
    };
    let copy_bw = run::copy_bandwidth(&gpu).map_err(|e| e.to_string())?;
    println!(
        "# {} on {} rank(s), {} ({} SMs), {} GPU(s); {}; {} buffers; graphLaunches {} runs {} warmup {}; {}; copy roofline {:.3} TB/s",
        args.collective.name(),
        args.ranks,
        gpu.name(),
        gpu.sm_count(),
        args.gpus,
        if args.deterministic {
            "deterministic"
        } else {
            "default mode"
        },
        if args.symmetric {
            "symmetric"
        } else if args.staged {
            "ordinary (staged)"
        } else if args.direct {
            "ordinary (direct)"
        } else {
            "ordinary"
        },
        args.graph_launches,
        args.runs,
        args.warmup,
        if args.graph_launches == 0 {
            "plain launches"
        } else if args.one_graph {
            "all ranks in one graph"
        } else {
            "one graph per rank"
        },
        copy_bw / 1e12
    );
    let progress = |done: usize, all: usize| {
        eprint!("\r# {done}/{all} sizes");
        let _ = std::io::stderr().flush();
    };
    #[cfg(feature = "mpi")]
    if let Some(m) = &mpi {
        use purlin::bootstrap::Bootstrap;
        let rows = run::run_rank(m, &gpu, &sweep, copy_bw, &progress).map_err(|e| e.to_string())?;
        if m.rank() == 0 {
            println!("{}", report::header(args.csv));
            for row in &rows {
                println!(
                    "{}",
                    report::line(row, args.collective, sweep.world, args.csv)
                );
            }
        }
        return Ok(());
    }
    println!("{}", report::header(args.csv));
    let rows = run::run(&gpu, &sweep, copy_bw, progress).map_err(|e| e.to_string())?;
    eprintln!();
    for row in &rows {
        println!(
            "{}",
            report::line(row, args.collective, args.ranks, args.csv)
        );
    }
    if let Some(f) = rows.first().and_then(|r| r.floor_us) {
        println!("# launch floor (an empty kernel per rank, timed the same way): {f:.2} us");
    }
    let wrong: u64 = rows.iter().filter_map(|r| r.wrong).sum();
    if let Some(path) = &args.plot {
        let series = vec![purlin_bench::plot::Series {
            label: format!("{} x{}", args.collective.name(), args.ranks),
            points: rows
                .iter()
                .map(|r| {
                    (
                        r.total_bytes,
                        r.busbw(args.collective, args.ranks),
                        r.roofline(),
                    )
                })
                .collect(),
        }];
        purlin_bench::plot::write_png(
            path,
            &format!(
                "Purlin {} on {} ranks, {}",
                args.collective.name(),
                args.ranks,
                gpu.name()
            ),
            &series,
        )?;
        eprintln!("# plot written to {}", path.display());
    }
    if args.check && wrong > 0 {
        return Err(format!("{wrong} wrong elements"));
    }
    Ok(())
}

fn rand_seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (std::process::id() as u64) << 32
}
