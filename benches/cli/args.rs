//! Command line of `purlin-bench`, as the original's benchmarks take it plus Purlin's flags.

use super::report::CollectiveKind;
use super::run::Skew;
use super::sizes::parse_size;
use clap::{Parser, ValueEnum};

/// Element types on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// f32
    F32,
    /// f16
    F16,
    /// bf16
    Bf16,
    /// fp8 e4m3
    E4m3,
    /// fp8 e5m2
    E5m2,
}

impl From<Dtype> for purlin::DataType {
    fn from(d: Dtype) -> Self {
        match d {
            Dtype::F32 => Self::F32,
            Dtype::F16 => Self::F16,
            Dtype::Bf16 => Self::Bf16,
            Dtype::E4m3 => Self::E4m3,
            Dtype::E5m2 => Self::E5m2,
        }
    }
}

/// Algorithms on the command line (`Options::algorithm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AlgorithmArg {
    /// The plan's choice from the size.
    Auto,
    /// Every rank sends its whole input as packets to every peer (where it fits).
    OneShot,
    /// Reduce-scatter over packets, then all-gather the shards (where it fits).
    TwoShot,
    /// The throughput regime at every size, for any collective: staged, or one pass where the
    /// peers reach.
    Throughput,
}

impl From<AlgorithmArg> for purlin::collective::Algorithm {
    fn from(a: AlgorithmArg) -> Self {
        match a {
            AlgorithmArg::Auto => Self::Auto,
            AlgorithmArg::OneShot => Self::OneShot,
            AlgorithmArg::TwoShot => Self::TwoShot,
            AlgorithmArg::Throughput => Self::Throughput,
        }
    }
}

/// Operators on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Op {
    /// sum
    Sum,
    /// max
    Max,
    /// min
    Min,
    /// product
    Prod,
}

impl From<Op> for purlin::ReduceOpKind {
    fn from(o: Op) -> Self {
        match o {
            Op::Sum => Self::Sum,
            Op::Max => Self::Max,
            Op::Min => Self::Min,
            Op::Prod => Self::Prod,
        }
    }
}

/// Benchmarks one Purlin collective over doubling sizes, printed as nccl-tests prints them.
#[derive(Parser, Debug, Clone)]
#[command(name = "purlin-bench", version, about)]
pub struct Args {
    /// The collective: its short name (ar, ag, rs, a2a, agv, rsv, a2av) or its name.
    #[arg(value_parser = super::report::parse_collective)]
    pub collective: CollectiveKind,
    /// Smallest size (K/M/G suffixes): AllGather's output, each rank's input otherwise.
    #[arg(default_value = "128", value_parser = parse_size)]
    pub min_bytes: u64,
    /// Largest size.
    #[arg(default_value = "128M", value_parser = parse_size)]
    pub max_bytes: u64,
    /// Collectives captured into a CUDA graph whose replays are timed (0: plain launches).
    #[arg(default_value_t = 8)]
    pub graph_launches: u32,
    /// Timed iterations per size (graph replays when graphs are on).
    #[arg(default_value_t = 32)]
    pub runs: u32,
    /// Untimed iterations first.
    #[arg(default_value_t = 8)]
    pub warmup: u32,
    /// Seed of the inputs (0: a fresh one, printed on stderr).
    #[arg(default_value_t = 0)]
    pub seed: u64,
    /// Ranks of the virtual node (all on one GPU, as threads of this process).
    #[arg(long, default_value_t = 8)]
    pub ranks: u32,
    /// Element type (default bf16 for reductions, as the original).
    #[arg(long, value_enum, default_value_t = Dtype::Bf16)]
    pub dtype: Dtype,
    /// Reduce operator.
    #[arg(long, value_enum, default_value_t = Op::Sum)]
    pub op: Op,
    /// Deterministic reductions (bitwise repeatable).
    #[arg(long)]
    pub deterministic: bool,
    /// Verify every result against a host f32 rank-order reference and count wrong elements.
    #[arg(long)]
    pub check: bool,
    /// CSV instead of the table.
    #[arg(long)]
    pub csv: bool,
    /// Write a PNG of busbw and roofline fraction against size.
    #[arg(long)]
    pub plot: Option<std::path::PathBuf>,
    /// Spread the ranks over this many GPUs of this machine (1: the virtual node).
    #[arg(long, default_value_t = 1)]
    pub gpus: u32,
    /// All ranks' calls in one CUDA graph (fork to every rank's stream, join back), which is
    /// what eight GPUs launching at once look like; without it every rank times its own graph,
    /// which on the virtual node mostly measures the GPU starting the ranks' launches in turn.
    /// Not with `--mpi` (ranks in other processes).
    #[arg(long)]
    pub one_graph: bool,
    /// The V forms' split: `linear` (rank p's share grows with p + 1) or a Zipf exponent (rank
    /// p's share falls as 1/(p+1)^s).
    #[arg(long, default_value = "linear", value_parser = parse_skew)]
    pub skew: Skew,
    /// One process per rank under `mpirun` (needs the `mpi` feature); the world is mpirun's.
    #[arg(long)]
    pub mpi: bool,
    /// Symmetric buffers (`purlin::SymmetricBuffer`, mapped in every peer) instead of ordinary
    /// ones: the fixed-size collectives, AllGatherV and ReduceScatterV then run one pass over the
    /// peers' buffers.
    #[arg(long)]
    pub symmetric: bool,
    /// Stage ordinary buffers through the workspace (`Options::staged`) even where the ranks
    /// share one address space (the virtual node), whose calls above the packet paths otherwise
    /// reach the peers' buffers directly.
    #[arg(long, conflicts_with = "symmetric")]
    pub staged: bool,
    /// Take the one pass over the peers' ordinary buffers at every size above the packet
    /// paths (`Options::direct`), not only where it pays.
    #[arg(long, conflicts_with_all = ["symmetric", "staged"])]
    pub direct: bool,
    /// Force the algorithm (`Options::algorithm`) instead of the plan's choice from the size:
    /// AllReduce's one-shot or two-shot packets (one that does not fit runs the throughput
    /// regime), or the throughput regime for any collective (no packet path).
    #[arg(long, value_enum)]
    pub algorithm: Option<AlgorithmArg>,
    /// Trace the calls (`Options::trace`) and print on stderr, per size, when the last timed
    /// call passed each phase on every rank (µs after the first rank's entry; one clock per
    /// GPU, so ranks compare on the virtual node).
    #[arg(long)]
    pub trace: bool,
    /// Launch every call only after the work before it on its stream has finished
    /// (`Options::strict_order`): no programmatic dependent launch of small calls.
    #[arg(long)]
    pub strict_order: bool,
}

/// `linear`, or a Zipf exponent (a finite number of at least 0).
fn parse_skew(s: &str) -> Result<Skew, String> {
    if s == "linear" {
        return Ok(Skew::Linear);
    }
    super::classic::zipf_exponent(Some(s)).map(Skew::Zipf)
}
