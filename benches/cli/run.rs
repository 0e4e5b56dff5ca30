//! Running one collective and timing it: every rank a thread of this process with its own
//! stream, all on one GPU (the virtual node) or spread over several, or one process per rank
//! under MPI; ranks meet at the bootstrap for every size. Time per collective is the slowest
//! rank's.

use super::one_graph::OneGraph;
use super::report::{CollectiveKind, Row};
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, sys};
use purlin::bootstrap::{Bootstrap, InProcess};
use purlin::collective::{self, Counts, Options};
use purlin::memory::{DeviceAllocator, Span};
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin::{Context, DataType, Gpu, ReduceOpKind, SymmetricBuffer};
use std::sync::Arc;

/// How one sweep runs.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// The collective.
    pub collective: CollectiveKind,
    /// Ranks.
    pub world: u32,
    /// GPUs the ranks are spread over (1: the virtual node).
    pub gpus: u32,
    /// Element type.
    pub dtype: DataType,
    /// Operator (reductions).
    pub op: ReduceOpKind,
    /// Options of the calls (mode, forced plan). With several, every size is timed once per
    /// entry on the same context and buffers (the tuner's candidates): rows come size by size,
    /// one per entry, in this order. Empty means the default options.
    pub options: Vec<Options>,
    /// Sizes (nccl-tests' size: AllGather's output, each rank's input otherwise).
    pub sizes: Vec<u64>,
    /// Collectives per CUDA graph (0: plain launches).
    pub graph_launches: u32,
    /// Timed iterations.
    pub runs: u32,
    /// Untimed iterations.
    pub warmup: u32,
    /// Seed of the inputs.
    pub seed: u64,
    /// Verify every result.
    pub check: bool,
    /// With `graph_launches > 0` and every rank in this process ([`run`]): all ranks' calls in
    /// one graph (what the ranks of eight GPUs launching at once look like), not one graph per
    /// rank.
    pub one_graph: bool,
    /// How the V forms split their totals.
    pub skew: Skew,
    /// Also time an empty kernel the same way, once per sweep (the rows' `floor_us`).
    pub floor: bool,
    /// Symmetric buffers ([`purlin::SymmetricBuffer`]) instead of ordinary ones.
    pub symmetric: bool,
}

/// A rank's input or output: an ordinary cudarc buffer, or a symmetric one.
enum Buffer {
    Ordinary(CudaSlice<u8>),
    Symmetric(SymmetricBuffer<u8>),
}

impl Buffer {
    /// `bytes` zeroed bytes (symmetric: on every rank of `ctx`, a collective call).
    fn new(
        ctx: &Context,
        stream: &Arc<CudaStream>,
        bytes: usize,
        symmetric: bool,
    ) -> purlin::Result<Self> {
        Ok(if symmetric {
            let mut b = SymmetricBuffer::new(ctx, bytes)?;
            stream.memcpy_htod(&vec![0u8; bytes], &mut b)?;
            Buffer::Symmetric(b)
        } else {
            Buffer::Ordinary(stream.alloc_zeros(bytes)?)
        })
    }

    fn span(&self, stream: &Arc<CudaStream>) -> Span {
        match self {
            Buffer::Ordinary(b) => Span::from_device(b, stream),
            Buffer::Symmetric(b) => Span::from_device(b, stream),
        }
    }

    /// Writes `data` at the start.
    fn write(&mut self, stream: &Arc<CudaStream>, data: &[u8]) -> purlin::Result<()> {
        match self {
            Buffer::Ordinary(b) => stream.memcpy_htod(data, &mut b.slice_mut(..data.len()))?,
            Buffer::Symmetric(b) => stream.memcpy_htod(data, b)?,
        }
        Ok(())
    }

    fn read(&self, stream: &Arc<CudaStream>) -> purlin::Result<Vec<u8>> {
        Ok(match self {
            Buffer::Ordinary(b) => stream.clone_dtoh(b)?,
            Buffer::Symmetric(b) => stream.clone_dtoh(b)?,
        })
    }

    /// Frees it (symmetric: on every rank, a collective call).
    fn free(self) -> purlin::Result<()> {
        match self {
            Buffer::Ordinary(_) => Ok(()),
            Buffer::Symmetric(b) => b.free(),
        }
    }
}

/// Elements per part of a size: what `count` the collective is called with (the V forms: the
/// total they split).
pub fn count_for(collective: CollectiveKind, world: u32, size: u64, elem: usize) -> u64 {
    let per_rank = match collective {
        CollectiveKind::AllReduce => size,
        _ => size / world as u64,
    };
    // Whole 16-byte units per part, so every part starts aligned.
    let unit = 16 / elem as u64;
    (per_rank / elem as u64) / unit * unit
}

/// How the V forms split their total between ranks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Skew {
    /// Rank `p` gets a share proportional to `p + 1`.
    Linear,
    /// Rank `p` gets a share proportional to `1 / (p + 1)^s` (Zipf with exponent `s`; 0 is an
    /// even split).
    Zipf(f64),
}

impl Skew {
    fn weight(self, p: u64) -> f64 {
        match self {
            Skew::Linear => (p + 1) as f64,
            Skew::Zipf(s) => 1.0 / ((p + 1) as f64).powf(s),
        }
    }
}

/// The V forms' counts for a total of `count × world` elements, split by `skew`, each a
/// multiple of a 16-byte unit (so the shares never sum past the total). AllToAllV: `2 × world`
/// counts per rank (sent, received): every rank sends `share(p) / world` to `p`.
pub fn v_counts(
    collective: CollectiveKind,
    world: u32,
    rank: u32,
    count: u64,
    elem: usize,
    skew: Skew,
) -> Vec<u64> {
    let unit = (16 / elem) as u64;
    let w = world as u64;
    let total = count * w;
    let weight_sum: f64 = (0..w).map(|p| skew.weight(p)).sum();
    let share =
        |p: u64| ((total as f64 * skew.weight(p) / weight_sum) as u64).min(total) / unit * unit;
    match collective {
        CollectiveKind::AllToAllV => {
            let sent: Vec<u64> = (0..w).map(|p| share(p) / w / unit * unit).collect();
            let received: Vec<u64> = (0..w)
                .map(|_| share(rank as u64) / w / unit * unit)
                .collect();
            [sent, received].concat()
        }
        _ => (0..w).map(share).collect(),
    }
}

/// The value of element `index` of `rank`'s input: counter-based (a hash of seed, rank and
/// index), so the reference of any output element is computed without the inputs in memory.
/// Small integers and halves, exactly representable in every type, so sums of a few ranks are
/// exact in f32.
pub fn input_value(seed: u64, rank: u32, index: u64) -> f32 {
    let mut x =
        seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(rank as u64 + 1)) ^ index.rotate_left(32);
    // splitmix64's finaliser.
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    ((x >> 40) % 8) as f32 * 0.5 - 2.0
}

/// `rank`'s input: `bytes` (whole elements) of [`input_value`]s.
pub fn inputs(seed: u64, rank: u32, bytes: usize, dtype: DataType) -> Vec<u8> {
    let size = dtype.size();
    let mut out = vec![0u8; bytes / size * size];
    for (i, e) in out.chunks_exact_mut(size).enumerate() {
        encode(dtype, input_value(seed, rank, i as u64), e);
    }
    out
}
#[cfg(test)]
fn decode(dtype: DataType, b: &[u8]) -> f32 {
    match dtype {
        DataType::F32 => f32::from_le_bytes(b[..4].try_into().unwrap()),
        DataType::F16 => {
            half::f16::from_bits(u16::from_le_bytes(b[..2].try_into().unwrap())).to_f32()
        }
        DataType::Bf16 => {
            half::bf16::from_bits(u16::from_le_bytes(b[..2].try_into().unwrap())).to_f32()
        }
        DataType::E4m3 => purlin::E4m3(b[0]).to_f32(),
        DataType::E5m2 => purlin::E5m2(b[0]).to_f32(),
    }
}

fn encode(dtype: DataType, v: f32, out: &mut [u8]) {
    match dtype {
        DataType::F32 => out[..4].copy_from_slice(&v.to_le_bytes()),
        DataType::F16 => out[..2].copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes()),
        DataType::Bf16 => {
            out[..2].copy_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes())
        }
        DataType::E4m3 => out[0] = purlin::E4m3::from_f32(v).0,
        DataType::E5m2 => out[0] = purlin::E5m2::from_f32(v).0,
    }
}

/// The reference's operators, as Purlin documents them: max/min ignore a NaN and keep the
/// earlier value on a tie.
fn combine(op: ReduceOpKind, a: f32, b: f32) -> f32 {
    let later_if = |takes_later: bool| if takes_later || a.is_nan() { b } else { a };
    match op {
        ReduceOpKind::Sum => a + b,
        ReduceOpKind::Max => later_if(b > a),
        ReduceOpKind::Min => later_if(b < a),
        ReduceOpKind::Prod => a * b,
    }
}

/// One run of a rank's expected output: `len` elements, each the reduction (in rank order, in
/// f32, rounded once) of the elements at the same index from `sources` (rank, first element
/// of that rank's input); a single source is a copy.
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    /// Elements.
    pub len: u64,
    /// (rank, element offset into its input), in reduction order.
    pub sources: Vec<(u32, u64)>,
}

/// What rank `r`'s output holds, run by run, for `count` (the V forms: `counts_of(p)` is rank
/// `p`'s counts array).
pub fn layout(
    collective: CollectiveKind,
    world: u32,
    r: u32,
    count: u64,
    counts_of: impl Fn(u32) -> Vec<u64>,
) -> Vec<Segment> {
    let all = |off: u64| (0..world).map(|p| (p, off)).collect::<Vec<_>>();
    let one = |p: u32, off: u64, len: u64| Segment {
        len,
        sources: vec![(p, off)],
    };
    let w = world as usize;
    match collective {
        CollectiveKind::AllReduce => vec![Segment {
            len: count,
            sources: all(0),
        }],
        CollectiveKind::AllGather => (0..world).map(|p| one(p, 0, count)).collect(),
        CollectiveKind::ReduceScatter => vec![Segment {
            len: count,
            sources: all(r as u64 * count),
        }],
        CollectiveKind::AllToAll => (0..world)
            .map(|p| one(p, r as u64 * count, count))
            .collect(),
        CollectiveKind::AllGatherV => {
            let c = counts_of(0);
            (0..world).map(|p| one(p, 0, c[p as usize])).collect()
        }
        CollectiveKind::ReduceScatterV => {
            let c = counts_of(0);
            vec![Segment {
                len: c[r as usize],
                sources: all(c[..r as usize].iter().sum()),
            }]
        }
        CollectiveKind::AllToAllV => (0..world)
            .map(|p| {
                let sent = &counts_of(p)[..w];
                one(p, sent[..r as usize].iter().sum(), sent[r as usize])
            })
            .collect(),
    }
}

/// Compares `got` (rank `r`'s output bytes) with the reference of its layout; returns (wrong
/// elements, elements compared). Elements the output is too short for count as wrong. Large
/// outputs are checked by this rank's share of the machine's cores.
pub fn wrong_elements(sweep: &Sweep, segments: &[Segment], got: &[u8]) -> (u64, u64) {
    const PIECE: u64 = 1 << 20;
    // (segment, first element, elements, byte offset in the output)
    let mut pieces = Vec::new();
    let mut at = 0u64;
    for (k, seg) in segments.iter().enumerate() {
        let mut i = 0;
        while i < seg.len {
            let n = PIECE.min(seg.len - i);
            pieces.push((k, i, n, at + i * sweep.dtype.size() as u64));
            i += n;
        }
        at += seg.len * sweep.dtype.size() as u64;
    }
    let compared = at / sweep.dtype.size() as u64;
    let check = |&(k, first, n, byte): &(usize, u64, u64, u64)| -> u64 {
        let (seg, size) = (&segments[k], sweep.dtype.size());
        let mut want = vec![0u8; size];
        let mut wrong = 0;
        for i in 0..n {
            let mut acc: Option<f32> = None;
            for &(p, off) in &seg.sources {
                let v = input_value(sweep.seed, p, off + first + i);
                acc = Some(acc.map_or(v, |a| combine(sweep.op, a, v)));
            }
            encode(sweep.dtype, acc.unwrap_or(0.0), &mut want);
            let at = (byte + i * size as u64) as usize;
            if got.get(at..at + size) != Some(&want[..]) {
                wrong += 1;
            }
        }
        wrong
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let helpers = (cores / sweep.world.max(1) as usize).clamp(1, 16);
    if helpers == 1 || pieces.len() < 2 {
        return (pieces.iter().map(check).sum(), compared);
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let wrong = std::thread::scope(|s| {
        let workers: Vec<_> = (0..helpers)
            .map(|_| {
                s.spawn(|| {
                    let mut wrong = 0;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        match pieces.get(i) {
                            Some(p) => wrong += check(p),
                            None => return wrong,
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("check thread panicked"))
            .sum()
    });
    (wrong, compared)
}

/// Bytes of each rank's input and output buffers for a size (the largest layout).
fn buffer_bytes(collective: CollectiveKind, world: u32, count: u64, elem: usize) -> (usize, usize) {
    let part = count as usize * elem;
    let all = part * world as usize;
    match collective {
        CollectiveKind::AllReduce => (part, part),
        CollectiveKind::AllGather => (part, all),
        CollectiveKind::ReduceScatter => (all, part),
        // V forms: whole totals on both sides bound every layout of the skewed counts.
        CollectiveKind::AllToAll
        | CollectiveKind::AllGatherV
        | CollectiveKind::ReduceScatterV
        | CollectiveKind::AllToAllV => (all, all),
    }
}

/// Device-to-device copy bandwidth of `gpu` (bytes read + written per second, median of 20
/// 256 MiB `cuMemcpyDtoD`s): the roofline's reference, measured in the same run.
pub fn copy_bandwidth(gpu: &Arc<Gpu>) -> purlin::Result<f64> {
    let stream = gpu.new_stream()?;
    let n = 256usize << 20;
    let a = stream.alloc_zeros::<u8>(n)?;
    let b = stream.alloc_zeros::<u8>(n)?;
    let (s, d) = (
        Span::from_device(&a, &stream).addr,
        Span::from_device(&b, &stream).addr,
    );
    let ms = time_ms(&stream, 20, |_| {
        // SAFETY: both allocations hold `n` bytes.
        unsafe { cudarc::driver::result::memcpy_dtod_async(d, s, n, stream.cu_stream()) }
            .map_err(purlin::Error::from)
    })?;
    Ok(2.0 * n as f64 / (ms * 1e-3))
}

/// Median milliseconds of `runs` executions of `f`, each between a pair of events.
pub(crate) fn time_ms(
    stream: &Arc<CudaStream>,
    runs: u32,
    mut f: impl FnMut(u32) -> purlin::Result<()>,
) -> purlin::Result<f64> {
    let ctx = stream.context();
    f(0)?;
    let mut times = Vec::with_capacity(runs as usize);
    for i in 0..runs.max(1) {
        let start = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        let end = ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
        start.record(stream)?;
        f(i)?;
        end.record(stream)?;
        end.synchronize()?;
        times.push(start.elapsed_ms(&end)? as f64);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}

/// One call of the sweep's collective on this rank.
///
/// # Safety
/// The spans are this rank's live buffers, large enough for `count`; `counts` (V forms) holds
/// what the V collectives read.
unsafe fn call(
    sweep: &Sweep,
    o: &Options,
    ctx: &Context,
    dst: Span,
    src: Span,
    count: u64,
    counts: Counts,
) -> purlin::Result<()> {
    let kind = sweep.collective;
    let call = collective::RawCall {
        kind,
        dtype: sweep.dtype,
        op: kind.reduces().then_some(sweep.op),
        dst,
        src,
        size: if kind.is_v() {
            collective::Size::Counts(counts)
        } else {
            collective::Size::Count(count)
        },
    };
    // SAFETY: forwarded contract.
    unsafe { collective::launch_raw(ctx, &call, o) }
}

/// Runs the sweep on the virtual node (or `sweep.gpus` GPUs of this machine): one thread per
/// rank. `progress(i, n)` is called after each size. Returns one row per size.
pub fn run(
    gpu: &Arc<Gpu>,
    sweep: &Sweep,
    copy_bandwidth: f64,
    progress: impl Fn(usize, usize) + Sync,
) -> purlin::Result<Vec<Row>> {
    let gpus: Vec<Arc<Gpu>> = (0..sweep.gpus.max(1))
        .map(|g| {
            if g == 0 {
                Ok(gpu.clone())
            } else {
                Gpu::open(g as usize)
            }
        })
        .collect::<purlin::Result<_>>()?;
    let one = if sweep.one_graph {
        Some(OneGraph::new(sweep.world, gpu.new_stream()?))
    } else {
        None
    };
    let (progress, one) = (&progress, one.as_ref());
    let results: Vec<purlin::Result<Vec<Row>>> = std::thread::scope(|s| -> purlin::Result<_> {
        let handles: Vec<_> = InProcess::group(sweep.world)?
            .into_iter()
            .map(|b| {
                let gpu = gpus[b.rank() as usize % gpus.len()].clone();
                s.spawn(move || run_rank_in(&b, &gpu, sweep, copy_bandwidth, progress, one))
            })
            .collect();
        Ok(handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect())
    })?;
    // Every rank computes the same rows; report the first failure, else rank 0's rows.
    let mut rows = None;
    for r in results {
        let r = r?;
        rows.get_or_insert(r);
    }
    Ok(rows.unwrap_or_default())
}

fn f64s(all: Vec<Vec<u8>>) -> Vec<f64> {
    all.iter()
        .map(|b| f64::from_le_bytes(b[..8].try_into().expect("8 bytes per rank")))
        .collect()
}

/// A kernel that does nothing: the launch floor, timed exactly as the collective is.
const EMPTY_PTX: &str = "
.version 7.0
.target sm_70
.address_size 64
.visible .entry purlin_bench_empty()
{
    ret;
}
";

/// Queues one empty kernel on `stream`.
fn launch_empty(stream: &Arc<CudaStream>, f: &CudaFunction) -> purlin::Result<()> {
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the kernel takes no parameters and touches no memory.
    unsafe { stream.launch_builder(f).launch(cfg) }?;
    Ok(())
}

/// Milliseconds per call of `call`, the sweep's way: plain launches, a graph per rank of
/// `graph_launches` calls, or all ranks' calls in one graph (`one`); the slowest rank's.
fn time_per_call<B: Bootstrap>(
    b: &B,
    sweep: &Sweep,
    stream: &Arc<CudaStream>,
    one: Option<&OneGraph>,
    call: impl Fn() -> purlin::Result<()>,
) -> purlin::Result<f64> {
    let calls = sweep.graph_launches;
    let capture = |calls: u32| -> purlin::Result<()> { (0..calls).try_for_each(|_| call()) };
    let per_call_ms = match one {
        Some(one) if calls > 0 => one
            .time(b.rank(), stream, calls, sweep.runs, || capture(calls))
            .map_err(purlin::Error::InvalidLaunch)?,
        _ if calls > 0 => {
            stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
            let captured = capture(calls);
            let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0))?;
            captured?;
            let graph = graph.ok_or_else(|| {
                purlin::Error::InvalidLaunch("the capture produced no graph".into())
            })?;
            time_ms(stream, sweep.runs, |_| {
                graph.launch().map_err(purlin::Error::from)
            })? / calls as f64
        }
        _ => time_ms(stream, sweep.runs, |_| call())?,
    };
    stream.synchronize()?;
    Ok(f64s(b.all_gather(&per_call_ms.to_le_bytes())?)
        .into_iter()
        .fold(0.0, f64::max))
}

/// Rank 0 prints every rank's phase times of its last traced call: µs after the earliest
/// rank's entry, one row per rank, then each phase's latest rank. Every rank calls.
fn print_trace<B: Bootstrap>(
    b: &B,
    sweep: &Sweep,
    size: u64,
    mine: &purlin::trace::CallTrace,
) -> purlin::Result<()> {
    use purlin::trace::{CallTrace, POINTS, Point};
    let bytes: Vec<u8> = mine.times().iter().flat_map(|t| t.to_le_bytes()).collect();
    let all: Vec<CallTrace> = b
        .all_gather(&bytes)?
        .iter()
        .map(|r| {
            CallTrace::from_times(std::array::from_fn(|p| {
                u64::from_le_bytes(r[8 * p..8 * p + 8].try_into().expect("8 bytes"))
            }))
        })
        .collect();
    if b.rank() != 0 {
        return Ok(());
    }
    let Some(first) = all.iter().filter_map(|t| t.at(Point::Entry)).min() else {
        return Ok(());
    };
    let us = |t: Option<u64>| t.map(|t| t.wrapping_sub(first) as i64 as f64 / 1e3);
    let names: Vec<String> = Point::ALL.iter().map(|p| format!("{p:?}")).collect();
    eprintln!(
        "trace {} w{} {size} B (us after the first entry): rank {}",
        sweep.collective.name(),
        sweep.world,
        names.join(" ")
    );
    for (rank, t) in all.iter().enumerate() {
        let cells: Vec<String> = Point::ALL
            .iter()
            .map(|&p| us(t.at(p)).map_or("-".into(), |v| format!("{v:.2}")))
            .collect();
        eprintln!("trace   {rank} {}", cells.join(" "));
    }
    let latest: Vec<String> = (0..POINTS)
        .map(|p| {
            all.iter()
                .filter_map(|t| us(t.at(Point::ALL[p])))
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                .map_or("-".into(), |v| format!("{v:.2}"))
        })
        .collect();
    eprintln!("trace   max {}", latest.join(" "));
    Ok(())
}

/// One rank's part of the sweep, through any bootstrap (in-process threads, or MPI: one process
/// per rank). Ranks meet at the bootstrap for every size; every rank returns the same rows
/// (times are the slowest rank's; wrong elements are summed over ranks). Per-rank graphs: with
/// ranks in one process, [`run`] can time all ranks' calls in one graph instead.
pub fn run_rank<B: Bootstrap + Clone + 'static>(
    b: &B,
    gpu: &Arc<Gpu>,
    sweep: &Sweep,
    copy_bandwidth: f64,
    progress: &(impl Fn(usize, usize) + Sync),
) -> purlin::Result<Vec<Row>> {
    run_rank_in(b, gpu, sweep, copy_bandwidth, progress, None)
}

fn run_rank_in<B: Bootstrap + Clone + 'static>(
    b: &B,
    gpu: &Arc<Gpu>,
    sweep: &Sweep,
    copy_bandwidth: f64,
    progress: &(impl Fn(usize, usize) + Sync),
    one: Option<&OneGraph>,
) -> purlin::Result<Vec<Row>> {
    let (r, world, elem) = (b.rank(), sweep.world, sweep.dtype.size());
    if b.world() != world {
        return Err(purlin::Error::WorldMismatch {
            world,
            bootstrap: b.world(),
        });
    }
    let max_size = sweep.sizes.iter().copied().max().unwrap_or(0);
    let max_count = count_for(sweep.collective, world, max_size, elem);
    let (in_cap, out_cap) = buffer_bytes(sweep.collective, world, max_count, elem);
    let stream = gpu.new_stream()?;
    let ws = Workspace::new(
        b,
        DeviceAllocator::new(gpu.clone()),
        WorkspaceRequirements::default(),
    )?;
    let ctx = Context::new(r, world, ws, &stream)?;
    let mut src = Buffer::new(&ctx, &stream, in_cap.max(16), sweep.symmetric)?;
    let mut dst = Buffer::new(&ctx, &stream, out_cap.max(16), sweep.symmetric)?;
    let mut counts_buf: CudaSlice<u64> = stream.alloc_zeros(2 * world as usize)?;
    let mine = inputs(sweep.seed, r, in_cap, sweep.dtype);
    if !mine.is_empty() {
        src.write(&stream, &mine)?;
    }
    drop(mine);
    // The launch floor of this timing mode, once per sweep.
    let floor_us = if sweep.floor {
        let module = stream
            .context()
            .load_module(cudarc::nvrtc::Ptx::from_src(EMPTY_PTX))?;
        let empty = module.load_function("purlin_bench_empty")?;
        b.barrier()?;
        Some(1e3 * time_per_call(b, sweep, &stream, one, || launch_empty(&stream, &empty))?)
    } else {
        None
    };
    let mut rows = Vec::with_capacity(sweep.sizes.len());
    for (i, &size) in sweep.sizes.iter().enumerate() {
        let count = count_for(sweep.collective, world, size, elem);
        let counts = v_counts(sweep.collective, world, r, count, elem, sweep.skew);
        stream.memcpy_htod(&counts, &mut counts_buf.slice_mut(..counts.len()))?;
        let (s_span, d_span) = (src.span(&stream), dst.span(&stream));
        let counts_arg = Counts {
            addr: Span::from_device(&counts_buf, &stream).addr,
            max_count: count * world as u64,
        };
        let defaults = [Options::default()];
        let options: &[Options] = if sweep.options.is_empty() {
            &defaults
        } else {
            &sweep.options
        };
        for o in options {
            // SAFETY: buffers sized for the largest size of the sweep; the counts buffer holds
            // this size's counts.
            let once = || unsafe { call(sweep, o, &ctx, d_span, s_span, count, counts_arg) };
            b.barrier()?;
            // 1. Check: poison, one call, compare with the reference of every rank's input.
            let checked = if sweep.check {
                dst.write(&stream, &vec![0xffu8; out_cap])?;
                once()?;
                ctx.synchronize()?;
                let got = dst.read(&stream)?;
                let segments = layout(sweep.collective, world, r, count, |p| {
                    v_counts(sweep.collective, world, p, count, elem, sweep.skew)
                });
                let (wrong, compared) = wrong_elements(sweep, &segments, &got);
                let sums = |x: u64| -> purlin::Result<u64> {
                    Ok(f64s(b.all_gather(&(x as f64).to_le_bytes())?)
                        .iter()
                        .sum::<f64>() as u64)
                };
                Some((sums(wrong)?, sums(compared)?))
            } else {
                None
            };
            // 2. Warm up, then time (plain launches, graphs per rank, or one graph).
            for _ in 0..sweep.warmup {
                once()?;
            }
            ctx.synchronize()?;
            b.barrier()?;
            let slowest = time_per_call(b, sweep, &stream, one, once)?;
            ctx.synchronize()?;
            if o.trace {
                print_trace(b, sweep, size, &ctx.last_call_trace()?)?;
            }
            rows.push(Row {
                total_bytes: size,
                count: size / elem as u64,
                dtype: sweep.dtype,
                redop: if sweep.collective.reduces() {
                    sweep.op.name()
                } else {
                    "none"
                },
                time_us: slowest * 1e3,
                wrong: checked.map(|c| c.0),
                checked: checked.map(|c| c.1),
                min_memory_bytes: super::report::min_memory_bytes(sweep.collective, world, size),
                copy_bandwidth,
                floor_us,
            });
        }
        if r == 0 {
            progress(i + 1, sweep.sizes.len());
        }
    }
    src.free()?;
    dst.free()?;
    ctx.finalize()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_whole_units_and_sum_to_at_most_the_total() {
        for skew in [
            Skew::Linear,
            Skew::Zipf(1.0),
            Skew::Zipf(0.0),
            Skew::Zipf(3.0),
        ] {
            for c in [CollectiveKind::AllGatherV, CollectiveKind::ReduceScatterV] {
                let counts = v_counts(c, 8, 3, 1000, 2, skew);
                assert_eq!(counts.len(), 8);
                assert!(counts.iter().all(|n| n % 8 == 0));
                assert!(counts.iter().sum::<u64>() <= 8000);
                match skew {
                    Skew::Linear => assert!(counts[7] > counts[0], "towards the last rank"),
                    Skew::Zipf(s) if s > 0.0 => assert!(counts[0] > counts[7], "towards rank 0"),
                    Skew::Zipf(_) => assert!(counts.iter().all(|&n| n == counts[0]), "even"),
                }
            }
            let a2a = v_counts(CollectiveKind::AllToAllV, 4, 1, 1024, 4, skew);
            assert_eq!(a2a.len(), 8);
            assert!(a2a[..4].iter().sum::<u64>() <= 1024, "sends fit the input");
        }
        assert_eq!(
            count_for(CollectiveKind::AllGather, 8, 1 << 20, 2),
            (1 << 20) / 8 / 2
        );
        assert_eq!(count_for(CollectiveKind::AllReduce, 8, 100, 4), 24);
    }

    fn sweep(collective: CollectiveKind) -> Sweep {
        Sweep {
            collective,
            world: 2,
            gpus: 1,
            dtype: DataType::F32,
            op: ReduceOpKind::Sum,
            options: vec![],
            sizes: vec![],
            graph_launches: 0,
            runs: 1,
            warmup: 0,
            seed: 1,
            check: true,
            one_graph: false,
            skew: Skew::Linear,
            floor: false,
            symmetric: false,
        }
    }

    /// The f32 output bytes of `f(i)` for `n` elements.
    fn f32s(n: u64, f: impl Fn(u64) -> f32) -> Vec<u8> {
        (0..n).flat_map(|i| f(i).to_le_bytes()).collect()
    }

    #[test]
    fn references_follow_the_layouts() {
        let x = |p: u32, i: u64| input_value(1, p, i);
        // ReduceScatter of 3 elements per part on rank 1: part 1 of both inputs, summed.
        let s = sweep(CollectiveKind::ReduceScatter);
        let seg = layout(CollectiveKind::ReduceScatter, 2, 1, 3, |_| vec![]);
        let good = f32s(3, |i| x(0, 3 + i) + x(1, 3 + i));
        assert_eq!(wrong_elements(&s, &seg, &good), (0, 3));
        let mut bad = good.clone();
        bad[4] ^= 0x40;
        assert_eq!(wrong_elements(&s, &seg, &bad), (1, 3));
        assert_eq!(wrong_elements(&s, &seg, &good[..8]), (1, 3), "short output");
        // AllGather: rank 0's part, then rank 1's.
        let seg = layout(CollectiveKind::AllGather, 2, 0, 2, |_| vec![]);
        let ag = f32s(4, |i| x((i / 2) as u32, i % 2));
        assert_eq!(
            wrong_elements(&sweep(CollectiveKind::AllGather), &seg, &ag),
            (0, 4)
        );
        // AllToAllV: rank 1 receives what each peer sent to it, after what they sent rank 0.
        let counts = |p: u32| {
            if p == 0 {
                vec![4, 8, 0, 0]
            } else {
                vec![0, 4, 0, 0]
            }
        };
        let seg = layout(CollectiveKind::AllToAllV, 2, 1, 0, counts);
        assert_eq!(
            seg[0],
            Segment {
                len: 8,
                sources: vec![(0, 4)]
            }
        );
        assert_eq!(
            seg[1],
            Segment {
                len: 4,
                sources: vec![(1, 0)]
            }
        );
        // Inputs are what the counter says, in every type.
        for t in [DataType::F32, DataType::Bf16, DataType::E4m3] {
            let b = inputs(7, 2, 6 * t.size(), t);
            for (i, e) in b.chunks(t.size()).enumerate() {
                assert_eq!(decode(t, e), input_value(7, 2, i as u64));
            }
        }
    }
}
