//! The original's benchmark binaries (`testAR`, `testAG`, `testRS`, `testA2A`, `testAGV`,
//! `testRSV`, `testA2AV`): the same positional arguments with the same meaning, results checked
//! by default, one CSV line per size from rank 0 only. `purlin-bench` is the richer tool.
//!
//! ```text
//! testAR 1K 1G 10 20 5 42                 # the virtual node: 8 ranks as threads of this process
//! mpirun -n 2 testAR 1K 1G                # one process per GPU (built with --features mpi)
//! ```

use super::args::{Dtype, Op};
use super::report::{CollectiveKind, Row};
use super::run::{self, Skew, Sweep};
use super::sizes::{doubling, parse_size};
use clap::Parser;
use purlin::Gpu;
use purlin::collective::{Options, ReductionMode};
use std::process::ExitCode;

/// The environment variable holding the V forms' Zipf exponent.
pub const ZIPF_ENV: &str = "BENCH_ZIPF_EXPONENT";

/// The V forms' default Zipf exponent.
pub const DEFAULT_ZIPF: f64 = 1.0;

/// Reduction modes on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Fastest (rank order not guaranteed).
    Default,
    /// Bitwise repeatable: rank-order f32 accumulation.
    Deterministic,
}

/// `[minBytes] [maxBytes] [graphLaunches] [runs] [warmup] [seed]`: a CUDA graph of `runs`
/// calls is launched `graphLaunches` times per size, after `warmup` untimed calls; sizes double
/// from `minBytes` to `maxBytes` (powers of two, multiples of 16; AllGather's output, each
/// rank's input otherwise). The V forms split their totals with a Zipf skew whose exponent is
/// `BENCH_ZIPF_EXPONENT` (default 1). Prints
/// `collective,world,totalBytes,datatype,lat(us),bw(GB/s),error(%),GPUName,warmup,runs,graph_launches`,
/// where `lat` is the median time per call over the graph launches (the slowest rank's), `bw`
/// is `totalBytes / lat` and `error` the percentage of output elements that differ from a host
/// f32 rank-order reference.
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub struct ClassicArgs {
    /// Smallest size (K/M/G suffixes).
    #[arg(default_value = "1K", value_parser = parse_size)]
    pub min_bytes: u64,
    /// Largest size.
    #[arg(default_value = "1G", value_parser = parse_size)]
    pub max_bytes: u64,
    /// Times the graph is launched (timed).
    #[arg(default_value_t = 10)]
    pub graph_launches: u32,
    /// Calls captured in the graph.
    #[arg(default_value_t = 10)]
    pub runs: u32,
    /// Untimed calls first.
    #[arg(default_value_t = 5)]
    pub warmup: u32,
    /// Seed of the inputs.
    #[arg(default_value_t = 42)]
    pub seed: u64,
    /// Reduction mode.
    #[arg(long, value_enum, default_value_t = Mode::Default)]
    pub reduction_mode: Mode,
    /// Skip the result check.
    #[arg(long)]
    pub no_check: bool,
    /// Element type.
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    pub dtype: Dtype,
    /// Reduce operator.
    #[arg(long, value_enum, default_value_t = Op::Sum)]
    pub op: Op,
    /// Ranks of the virtual node (without MPI: threads of this process on GPU 0).
    #[arg(long, default_value_t = 8)]
    pub ranks: u32,
}

/// Checks the original's rules on the size range.
///
/// ```
/// use purlin_bench::classic::check_range;
/// assert_eq!(check_range(1024, 1 << 30), Ok(()));
/// assert!(check_range(8, 1024).unwrap_err().contains("multiple of 16"));
/// assert!(check_range(1000, 1024).unwrap_err().contains("power of two"));
/// assert!(check_range(4096, 1024).unwrap_err().contains("above"));
/// ```
pub fn check_range(min: u64, max: u64) -> Result<(), String> {
    for (name, v) in [("minBytes", min), ("maxBytes", max)] {
        if !v.is_power_of_two() {
            return Err(format!("{name} {v} is not a power of two"));
        }
        if v % 16 != 0 {
            return Err(format!("{name} {v} is not a multiple of 16"));
        }
    }
    if min > max {
        return Err(format!("minBytes {min} is above maxBytes {max}"));
    }
    Ok(())
}

/// The Zipf exponent from `value` (the environment variable's text, if set).
///
/// ```
/// use purlin_bench::classic::zipf_exponent;
/// assert_eq!(zipf_exponent(None), Ok(1.0));
/// assert_eq!(zipf_exponent(Some("0.5")), Ok(0.5));
/// assert!(zipf_exponent(Some("-1")).is_err());
/// assert!(zipf_exponent(Some("many")).is_err());
/// ```
pub fn zipf_exponent(value: Option<&str>) -> Result<f64, String> {
    match value {
        None => Ok(DEFAULT_ZIPF),
        Some(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Ok(s),
            _ => Err(format!(
                "{ZIPF_ENV}={v:?} is not a finite exponent of at least 0"
            )),
        },
    }
}

/// The CSV header.
pub const HEADER: &str = "collective,world,totalBytes,datatype,lat(us),bw(GB/s),error(%),GPUName,warmup,runs,graph_launches";

/// One CSV line.
pub fn line(c: CollectiveKind, world: u32, row: &Row, gpu: &str, args: &ClassicArgs) -> String {
    format!(
        "{},{},{},{},{:.3},{:.3},{},{},{},{},{}",
        c.name(),
        world,
        row.total_bytes,
        row.dtype.name(),
        row.time_us,
        row.algbw(),
        row.error_percent()
            .map_or("N/A".to_string(), |e| format!("{e:.4}")),
        gpu.replace(',', " "),
        args.warmup,
        args.runs,
        args.graph_launches
    )
}

/// The sweep the arguments describe on `world` ranks.
pub fn sweep(c: CollectiveKind, args: &ClassicArgs, world: u32, zipf: f64) -> Sweep {
    Sweep {
        collective: c,
        world,
        gpus: 1,
        dtype: args.dtype.into(),
        op: args.op.into(),
        options: vec![Options {
            mode: match args.reduction_mode {
                Mode::Default => ReductionMode::Default,
                Mode::Deterministic => ReductionMode::Deterministic,
            },
            ..Default::default()
        }],
        sizes: doubling(args.min_bytes, args.max_bytes),
        // A graph of `runs` calls, launched `graphLaunches` times.
        graph_launches: args.runs,
        runs: args.graph_launches,
        warmup: args.warmup,
        seed: args.seed,
        check: !args.no_check,
        one_graph: true,
        skew: Skew::Zipf(zipf),
        floor: false,
        symmetric: false,
    }
}

/// Whether this process was started by an MPI launcher.
fn under_mpi() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// The whole program of one binary.
pub fn main(c: CollectiveKind) -> ExitCode {
    let args = ClassicArgs::parse();
    match bench(c, &args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("{}: {e}", std::env::args().next().unwrap_or_default());
            ExitCode::FAILURE
        }
    }
}

/// Runs the sweep and prints it; `Ok(false)` when the check found wrong elements.
fn bench(c: CollectiveKind, args: &ClassicArgs) -> Result<bool, String> {
    check_range(args.min_bytes, args.max_bytes)?;
    if args.runs == 0 || args.graph_launches == 0 {
        return Err("graphLaunches and runs must be at least 1".into());
    }
    let zipf = zipf_exponent(std::env::var(ZIPF_ENV).ok().as_deref())?;
    if under_mpi() {
        let Some((rows, world, gpu)) = mpi_rows(c, args, zipf)? else {
            return Ok(true); // Not rank 0: rank 0 prints.
        };
        println!("{HEADER}");
        for row in &rows {
            println!("{}", line(c, world, row, &gpu, args));
        }
        return Ok(rows.iter().all(|r| r.wrong.unwrap_or(0) == 0));
    }
    // The virtual node: one sweep per size, each line printed as soon as its size is done.
    let gpu = Gpu::open(0).map_err(|e| format!("needs a GPU: {e}"))?;
    let all = sweep(c, args, args.ranks, zipf);
    println!("{HEADER}");
    let mut clean = true;
    for &size in &all.sizes {
        let one = Sweep {
            sizes: vec![size],
            ..all.clone()
        };
        for row in run::run(&gpu, &one, 0.0, |_, _| {}).map_err(|e| e.to_string())? {
            clean &= row.wrong.unwrap_or(0) == 0;
            println!("{}", line(c, args.ranks, &row, gpu.name(), args));
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
    }
    Ok(clean)
}

#[cfg(feature = "mpi")]
fn mpi_rows(
    c: CollectiveKind,
    args: &ClassicArgs,
    zipf: f64,
) -> Result<Option<(Vec<Row>, u32, String)>, String> {
    use purlin::bootstrap::{Bootstrap, Mpi};
    let m = Mpi::init().map_err(|e| e.to_string())?;
    let gpu = Gpu::open(m.local_device().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let s = sweep(c, args, m.world(), zipf);
    let rows = run::run_rank(&m, &gpu, &s, 0.0, &|_, _| {}).map_err(|e| e.to_string())?;
    Ok((m.rank() == 0).then(|| (rows, m.world(), gpu.name().to_string())))
}

#[cfg(not(feature = "mpi"))]
fn mpi_rows(
    _: CollectiveKind,
    _: &ClassicArgs,
    _: f64,
) -> Result<Option<(Vec<Row>, u32, String)>, String> {
    Err("started under an MPI launcher, but built without the `mpi` feature".into())
}
