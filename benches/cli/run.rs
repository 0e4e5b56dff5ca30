//! Running one collective and timing it: every rank a thread of this process with its own
//! stream, all on one GPU (the virtual node) or spread over several, or one process per rank
//! under MPI; ranks meet at the bootstrap for every size. Time per collective is the slowest
//! rank's.

use super::report::{Collective, Row};
use cudarc::driver::{CudaSlice, CudaStream, sys};
use purlin::bootstrap::{Bootstrap, InProcess};
use purlin::collective::{self, Counts, Options};
use purlin::memory::{DeviceAllocator, Span};
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin::{Context, DataType, Gpu, ReduceOpKind};
use std::sync::Arc;

/// How one sweep runs.
#[derive(Clone, Debug)]
pub struct Sweep {
    /// The collective.
    pub collective: Collective,
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
}

/// Elements per part of a size: what `count` the collective is called with (the V forms: the
/// total they split).
pub fn count_for(collective: Collective, world: u32, size: u64, elem: usize) -> u64 {
    let per_rank = match collective {
        Collective::Ar => size,
        _ => size / world as u64,
    };
    // Whole 16-byte units per part, so every part starts aligned.
    let unit = 16 / elem as u64;
    (per_rank / elem as u64) / unit * unit
}

/// The V forms' counts for a total of `count × world` elements: linear skew (rank `p` gets a
/// share proportional to `p + 1`), each a multiple of a 16-byte unit. AllToAllV: `2 × world`
/// counts per rank (sent, received).
pub fn v_counts(
    collective: Collective,
    world: u32,
    rank: u32,
    count: u64,
    elem: usize,
) -> Vec<u64> {
    let unit = (16 / elem) as u64;
    let w = world as u64;
    let total = count * w;
    let weight_sum = w * (w + 1) / 2;
    let share = |p: u64| (total * (p + 1) / weight_sum) / unit * unit;
    match collective {
        Collective::A2av => {
            // Rank r sends share(p)/w elements to p; receives share(r)/w from everyone.
            let sent: Vec<u64> = (0..w).map(|p| share(p) / w / unit * unit).collect();
            let received: Vec<u64> = (0..w)
                .map(|_| share(rank as u64) / w / unit * unit)
                .collect();
            [sent, received].concat()
        }
        _ => (0..w).map(share).collect(),
    }
}

/// Deterministic pseudo-random elements of `dtype` (small integers and halves, exactly
/// representable in every type, so sums of a few ranks are exact in f32).
pub fn inputs(seed: u64, rank: u32, bytes: usize, dtype: DataType) -> Vec<u8> {
    let mut x = seed ^ (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(rank as u64 + 1));
    let size = dtype.size();
    let mut out = vec![0u8; bytes / size * size];
    for e in out.chunks_exact_mut(size) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = ((x >> 40) % 8) as f32 * 0.5 - 2.0;
        match dtype {
            DataType::F32 => e.copy_from_slice(&v.to_le_bytes()),
            DataType::F16 => e.copy_from_slice(&half::f16::from_f32(v).to_bits().to_le_bytes()),
            DataType::Bf16 => e.copy_from_slice(&half::bf16::from_f32(v).to_bits().to_le_bytes()),
            DataType::E4m3 => e[0] = purlin::E4m3::from_f32(v).0,
            DataType::E5m2 => e[0] = purlin::E5m2::from_f32(v).0,
        }
    }
    out
}

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

fn combine(op: ReduceOpKind, a: f32, b: f32) -> f32 {
    match op {
        ReduceOpKind::Sum => a + b,
        ReduceOpKind::Max => {
            if b > a || a.is_nan() {
                b
            } else {
                a
            }
        }
        ReduceOpKind::Min => {
            if b < a || a.is_nan() {
                b
            } else {
                a
            }
        }
        ReduceOpKind::Prod => a * b,
    }
}

/// Reduces equal-length byte slices element by element in f32, in order, rounding once.
fn reduce(dtype: DataType, op: ReduceOpKind, parts: &[&[u8]]) -> Vec<u8> {
    let size = dtype.size();
    let mut out = vec![0u8; parts[0].len()];
    for (i, o) in out.chunks_exact_mut(size).enumerate() {
        let at = i * size;
        let acc = parts[1..]
            .iter()
            .fold(decode(dtype, &parts[0][at..]), |a, p| {
                combine(op, a, decode(dtype, &p[at..]))
            });
        encode(dtype, acc, o);
    }
    out
}

/// What every rank's output must be, from every rank's input.
fn expected(sweep: &Sweep, count: u64, all_in: &[Vec<u8>], counts: &[Vec<u64>]) -> Vec<Vec<u8>> {
    let (w, size) = (sweep.world as usize, sweep.dtype.size());
    let part = count as usize * size;
    match sweep.collective {
        Collective::Ar => {
            let parts: Vec<&[u8]> = all_in.iter().map(|v| &v[..part]).collect();
            vec![reduce(sweep.dtype, sweep.op, &parts); w]
        }
        Collective::Ag => vec![all_in.iter().flat_map(|v| v[..part].to_vec()).collect(); w],
        Collective::Rs => (0..w)
            .map(|r| {
                let parts: Vec<&[u8]> = all_in
                    .iter()
                    .map(|v| &v[r * part..(r + 1) * part])
                    .collect();
                reduce(sweep.dtype, sweep.op, &parts)
            })
            .collect(),
        Collective::A2a => (0..w)
            .map(|r| {
                (0..w)
                    .flat_map(|p| all_in[p][r * part..(r + 1) * part].to_vec())
                    .collect()
            })
            .collect(),
        Collective::Agv => {
            let c = &counts[0];
            vec![
                (0..w)
                    .flat_map(|p| all_in[p][..c[p] as usize * size].to_vec())
                    .collect();
                w
            ]
        }
        Collective::Rsv => {
            let c = &counts[0];
            (0..w)
                .map(|r| {
                    let off = c[..r].iter().sum::<u64>() as usize * size;
                    let len = c[r] as usize * size;
                    let parts: Vec<&[u8]> = all_in.iter().map(|v| &v[off..off + len]).collect();
                    reduce(sweep.dtype, sweep.op, &parts)
                })
                .collect()
        }
        Collective::A2av => (0..w)
            .map(|r| {
                (0..w)
                    .flat_map(|p| {
                        let sent = &counts[p][..w];
                        let off = sent[..r].iter().sum::<u64>() as usize * size;
                        all_in[p][off..off + sent[r] as usize * size].to_vec()
                    })
                    .collect()
            })
            .collect(),
    }
}

/// Bytes of each rank's input and output buffers for a size (the largest layout).
fn buffer_bytes(collective: Collective, world: u32, count: u64, elem: usize) -> (usize, usize) {
    let part = count as usize * elem;
    let all = part * world as usize;
    match collective {
        Collective::Ar => (part, part),
        Collective::Ag => (part, all),
        Collective::Rs => (all, part),
        // V forms: whole totals on both sides bound every layout of the skewed counts.
        Collective::A2a | Collective::Agv | Collective::Rsv | Collective::A2av => (all, all),
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
fn time_ms(
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
    let (t, op) = (sweep.dtype, sweep.op);
    // SAFETY: forwarded contract.
    unsafe {
        match sweep.collective {
            Collective::Ar => collective::all_reduce_raw(ctx, t, op, dst, src, count, o),
            Collective::Ag => collective::all_gather_raw(ctx, t, dst, src, count, o),
            Collective::Rs => collective::reduce_scatter_raw(ctx, t, op, dst, src, count, o),
            Collective::A2a => collective::all_to_all_raw(ctx, t, dst, src, count, o),
            Collective::Agv => collective::all_gather_v_raw(ctx, t, dst, src, counts, o),
            Collective::Rsv => collective::reduce_scatter_v_raw(ctx, t, op, dst, src, counts, o),
            Collective::A2av => collective::all_to_all_v_raw(ctx, t, dst, src, counts, o),
        }
    }
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
    let progress = &progress;
    let results: Vec<purlin::Result<Vec<Row>>> = std::thread::scope(|s| -> purlin::Result<_> {
        let handles: Vec<_> = InProcess::group(sweep.world)?
            .into_iter()
            .map(|b| {
                let gpu = gpus[b.rank() as usize % gpus.len()].clone();
                s.spawn(move || run_rank(&b, &gpu, sweep, copy_bandwidth, progress))
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

/// One rank's part of the sweep, through any bootstrap (in-process threads, or MPI: one process
/// per rank). Ranks meet at the bootstrap for every size; every rank returns the same rows
/// (times are the slowest rank's; wrong elements are summed over ranks).
pub fn run_rank<B: Bootstrap + Clone + 'static>(
    b: &B,
    gpu: &Arc<Gpu>,
    sweep: &Sweep,
    copy_bandwidth: f64,
    progress: &(impl Fn(usize, usize) + Sync),
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
    let mut src: CudaSlice<u8> = stream.alloc_zeros(in_cap.max(16))?;
    let mut dst: CudaSlice<u8> = stream.alloc_zeros(out_cap.max(16))?;
    let mut counts_buf: CudaSlice<u64> = stream.alloc_zeros(2 * world as usize)?;
    let mine = inputs(sweep.seed, r, in_cap, sweep.dtype);
    if !mine.is_empty() {
        stream.memcpy_htod(&mine, &mut src.slice_mut(..mine.len()))?;
    }
    let mut rows = Vec::with_capacity(sweep.sizes.len());
    for (i, &size) in sweep.sizes.iter().enumerate() {
        let count = count_for(sweep.collective, world, size, elem);
        let counts = v_counts(sweep.collective, world, r, count, elem);
        stream.memcpy_htod(&counts, &mut counts_buf.slice_mut(..counts.len()))?;
        let (s_span, d_span) = (
            Span::from_device(&src, &stream),
            Span::from_device(&dst, &stream),
        );
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
            b.barrier()?;
            // 1. Check: poison, one call, compare with the reference built from every rank's input.
            let wrong = if sweep.check {
                stream.memcpy_htod(&vec![0xffu8; out_cap], &mut dst.slice_mut(..out_cap))?;
                // SAFETY: buffers sized for the largest size of the sweep.
                unsafe { call(sweep, o, &ctx, d_span, s_span, count, counts_arg)? };
                ctx.synchronize()?;
                let (ib, ob) = buffer_bytes(sweep.collective, world, count, elem);
                let mut got = stream.clone_dtoh(&dst)?;
                got.truncate(ob);
                let all_in: Vec<Vec<u8>> = (0..world)
                    .map(|p| inputs(sweep.seed, p, ib, sweep.dtype))
                    .collect();
                let all_counts: Vec<Vec<u64>> = (0..world)
                    .map(|p| v_counts(sweep.collective, world, p, count, elem))
                    .collect();
                let want = expected(sweep, count, &all_in, &all_counts).swap_remove(r as usize);
                let n = want.len().min(got.len());
                let differing = got[..n]
                    .chunks(elem)
                    .zip(want[..n].chunks(elem))
                    .filter(|(a, b)| a != b)
                    .count();
                let mine = (differing + (want.len() - n) / elem) as f64;
                Some(f64s(b.all_gather(&mine.to_le_bytes())?).iter().sum::<f64>() as u64)
            } else {
                None
            };
            // 2. Warm up, then time (graph replays or plain launches).
            for _ in 0..sweep.warmup {
                // SAFETY: as above.
                unsafe { call(sweep, o, &ctx, d_span, s_span, count, counts_arg)? };
            }
            ctx.synchronize()?;
            b.barrier()?;
            let per_call_ms = if sweep.graph_launches > 0 {
                stream
                    .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
                let mut captured = Ok(());
                for _ in 0..sweep.graph_launches {
                    // SAFETY: as above.
                    captured = captured.and_then(|_| unsafe {
                        call(sweep, o, &ctx, d_span, s_span, count, counts_arg)
                    });
                }
                let graph = stream.end_capture(sys::CUgraphInstantiate_flags(0))?;
                captured?;
                let graph = graph.ok_or_else(|| {
                    purlin::Error::InvalidLaunch("the capture produced no graph".into())
                })?;
                time_ms(&stream, sweep.runs, |_| {
                    graph.launch().map_err(purlin::Error::from)
                })? / sweep.graph_launches as f64
            } else {
                // SAFETY: as above.
                time_ms(&stream, sweep.runs, |_| unsafe {
                    call(sweep, o, &ctx, d_span, s_span, count, counts_arg)
                })?
            };
            ctx.synchronize()?;
            let slowest = f64s(b.all_gather(&per_call_ms.to_le_bytes())?)
                .into_iter()
                .fold(0.0, f64::max);
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
                wrong,
                min_memory_bytes: sweep.collective.min_memory_bytes(world, size),
                copy_bandwidth,
            });
        }
        if r == 0 {
            progress(i + 1, sweep.sizes.len());
        }
    }
    ctx.finalize()?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_whole_units_and_sum_to_at_most_the_total() {
        for c in [Collective::Agv, Collective::Rsv] {
            let counts = v_counts(c, 8, 3, 1000, 2);
            assert_eq!(counts.len(), 8);
            assert!(counts.iter().all(|n| n % 8 == 0));
            assert!(counts.iter().sum::<u64>() <= 8000);
            assert!(counts[7] > counts[0], "skewed towards the last rank");
        }
        let a2a = v_counts(Collective::A2av, 4, 1, 1024, 4);
        assert_eq!(a2a.len(), 8);
        assert_eq!(count_for(Collective::Ag, 8, 1 << 20, 2), (1 << 20) / 8 / 2);
        assert_eq!(count_for(Collective::Ar, 8, 100, 4), 24);
    }

    #[test]
    fn references_follow_the_layouts() {
        let sweep = Sweep {
            collective: Collective::Rs,
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
        };
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let all_in = vec![f(&[1.0, 2.0]), f(&[10.0, 20.0])];
        assert_eq!(
            expected(&sweep, 1, &all_in, &[]),
            vec![f(&[11.0]), f(&[22.0])]
        );
        let ag = Sweep {
            collective: Collective::Ag,
            ..sweep.clone()
        };
        assert_eq!(expected(&ag, 1, &all_in, &[]), vec![f(&[1.0, 10.0]); 2]);
    }
}
