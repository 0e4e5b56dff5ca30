//! `purlin-tune`: sweeps the codesign knobs (blocks, producer blocks, chunk size, and for
//! AllReduce the algorithm) of every collective on the present GPU's virtual node and writes a
//! `purlin-tuning` table file. Point `PURLIN_TUNING` at it to use it; the compiled-in table
//! stays the default otherwise.
//!
//! ```text
//! purlin-tune --ranks 2,4,8 --out tuning/sm90.table
//! ```

use clap::Parser;
use purlin::collective::{Algorithm, CollectiveKind, Options};
use purlin::{DataType, Gpu, ReduceOpKind};
use purlin_bench::run::{self, Sweep};
use purlin_tuning::{Choice, Row, Table, write_rows};

#[derive(Parser, Debug)]
#[command(
    name = "purlin-tune",
    about = "Sweep Purlin's codesign knobs on this GPU and write a tuning table"
)]
struct Args {
    /// World sizes of the virtual node to tune.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8")]
    ranks: Vec<u32>,
    /// Collectives to tune.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ar,ag,rs,a2a,agv,rsv,a2av",
        value_parser = purlin_bench::report::parse_collective
    )]
    collectives: Vec<CollectiveKind>,
    /// Band upper bounds (dispatch sizes); the last band is open-ended.
    #[arg(long, value_delimiter = ',', default_value = "64K,1M,16M,256M", value_parser = purlin_bench::sizes::parse_size)]
    bands: Vec<u64>,
    /// Timed graph replays per candidate.
    #[arg(long, default_value_t = 10)]
    runs: u32,
    /// Where to write the table.
    #[arg(long, default_value = "purlin-tuning.table")]
    out: std::path::PathBuf,
}

/// The benchmark size whose dispatch size is `band` for `c` on `world` ranks.
fn size_for_band(c: CollectiveKind, world: u32, band: u64) -> u64 {
    match c {
        CollectiveKind::AllReduce => band,
        _ => band * world as u64,
    }
}

fn main() {
    let args = Args::parse();
    let gpu = match Gpu::open(0) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("purlin-tune: needs a GPU: {e}");
            std::process::exit(1);
        }
    };
    let copy_bw = run::copy_bandwidth(&gpu).unwrap_or(0.0);
    let base = Table::builtin();
    let mut rows: Vec<Row> = Vec::new();
    for &world in &args.ranks {
        // Every rank's blocks must be resident together: one block per SM each.
        let max_blocks =
            (gpu.sm_count() / world).min(purlin::purlin_device::context::MAX_BLOCKS as u32);
        for &c in &args.collectives {
            for (bi, &band) in args.bands.iter().enumerate() {
                let size = size_for_band(c, world, band);
                let start = base.lookup(gpu.compute_capability(), world, c, band);
                // Every candidate is timed on one context and one set of buffers: the staged
                // knobs (producer blocks, chunk size) for every block count, with the plan's
                // algorithm and, for AllReduce, the throughput regime forced; and for AllReduce
                // the latency algorithms forced once per block count (put and chunk do not
                // reach the packet paths; a forced algorithm that does not fit the workspace
                // falls back to the throughput regime, so every candidate is valid).
                let (staged_algorithms, latency): (&[Option<Algorithm>], &[Algorithm]) =
                    if c == CollectiveKind::AllReduce {
                        (
                            &[None, Some(Algorithm::Throughput)],
                            &[Algorithm::OneShot, Algorithm::TwoShot],
                        )
                    } else {
                        (&[None], &[])
                    };
                let with = |blocks: u32, put: u32, chunk: u64, algorithm: Option<Algorithm>| {
                    let mut plan = start.plan;
                    (plan.put_blocks, plan.chunk_bytes) = (put, chunk);
                    if let Some(a) = algorithm {
                        plan.algorithm = a as u32;
                    }
                    Choice { blocks, plan }
                };
                let block_counts = [4u32, 8, 16, 32, 64]
                    .into_iter()
                    .filter(|&b| b <= max_blocks);
                let staged = block_counts.clone().flat_map(|blocks| {
                    [blocks / 4, blocks / 2]
                        .into_iter()
                        .filter(|&p| p >= 1)
                        .flat_map(move |put| {
                            [256u64 << 10, 1 << 20, 4 << 20]
                                .into_iter()
                                .flat_map(move |chunk| {
                                    staged_algorithms
                                        .iter()
                                        .map(move |&a| with(blocks, put, chunk, a))
                                })
                        })
                });
                let forced = block_counts.flat_map(|blocks| {
                    let (put, chunk) = (start.plan.put_blocks, start.plan.chunk_bytes);
                    latency
                        .iter()
                        .map(move |&a| with(blocks, put, chunk, Some(a)))
                });
                let candidates: Vec<Choice> = staged.chain(forced).collect();
                let sweep = Sweep {
                    collective: c,
                    world,
                    gpus: 1,
                    dtype: DataType::Bf16,
                    op: ReduceOpKind::Sum,
                    options: candidates
                        .iter()
                        .map(|&choice| Options {
                            choice: Some(choice),
                            ..Default::default()
                        })
                        .collect(),
                    sizes: vec![size],
                    graph_launches: 4,
                    runs: args.runs,
                    warmup: 2,
                    seed: 1,
                    check: false,
                    // Timed as eight GPUs would see it (all ranks' calls in one graph), which
                    // is what decides the latency bands.
                    one_graph: true,
                    skew: run::Skew::Linear,
                    floor: false,
                    symmetric: false,
                };
                let best = match run::run(&gpu, &sweep, copy_bw, |_, _| {}) {
                    Ok(rows) => rows
                        .iter()
                        .zip(&candidates)
                        .map(|(r, &c)| (r.time_us, c))
                        .min_by(|a, b| a.0.total_cmp(&b.0)),
                    Err(e) => {
                        eprintln!("# {} x{world} band {band}: {e}", c.name());
                        None
                    }
                };
                if let Some((t, choice)) = best {
                    eprintln!(
                        "# {} x{world} band {band}: {t:.1} us with {} blocks, {} put, {} B chunks, {:?}",
                        c.name(),
                        choice.blocks,
                        choice.plan.put_blocks,
                        choice.plan.chunk_bytes,
                        Algorithm::of(&choice.plan)
                    );
                    let max_bytes = if bi + 1 == args.bands.len() {
                        u64::MAX
                    } else {
                        band
                    };
                    rows.push(Row {
                        arch: gpu.compute_capability(),
                        world,
                        collective: c,
                        max_bytes,
                        blocks: choice.blocks,
                        plan: choice.plan,
                    });
                }
            }
            // Written after every collective, so a sweep stopped early still leaves a table of
            // what it finished.
            if let Err(e) = std::fs::write(&args.out, write_rows(&rows)) {
                eprintln!("purlin-tune: cannot write {}: {e}", args.out.display());
                std::process::exit(1);
            }
        }
    }
    println!(
        "{} rows written to {} (use it with PURLIN_TUNING={})",
        rows.len(),
        args.out.display(),
        args.out.display()
    );
}
