//! Shared test support: fresh random inputs, poisoning, and references that do not use the code
//! under test (f64 accumulation; f32 rank-order accumulation with independent conversions).

pub mod sequence;

use half::{bf16, f16};
use purlin::{DataType, ReduceOpKind};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

/// A generator seeded from the OS, with the seed printed so a failure can be replayed
/// (`PURLIN_TEST_SEED=<seed>` fixes it).
pub fn fresh_rng(what: &str) -> SmallRng {
    let seed = std::env::var("PURLIN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random::<u64>());
    eprintln!("{what}: seed {seed}");
    SmallRng::seed_from_u64(seed)
}

/// The byte every output is filled with before a run: as f32, f16, bf16 or fp8 it is a NaN or
/// an unlikely value, so an unwritten element never passes.
pub const POISON: u8 = 0xff;

/// Decodes an element of `dtype` from little-endian bytes to f64, independently of the code
/// under test.
pub fn decode(dtype: DataType, bytes: &[u8]) -> f64 {
    match dtype {
        DataType::F32 => f32::from_le_bytes(bytes[..4].try_into().unwrap()) as f64,
        DataType::F16 => {
            f16::from_bits(u16::from_le_bytes(bytes[..2].try_into().unwrap())).to_f64()
        }
        DataType::Bf16 => {
            bf16::from_bits(u16::from_le_bytes(bytes[..2].try_into().unwrap())).to_f64()
        }
        DataType::E4m3 => fp8_decode(bytes[0], 3, 7, false),
        DataType::E5m2 => fp8_decode(bytes[0], 2, 15, true),
    }
}

/// fp8 from first principles: sign, `exp_bits = 7 - man`, bias; e4m3 has no infinity and one
/// NaN (S.1111.111), e5m2 is IEEE-like.
pub fn fp8_decode(b: u8, man: u32, bias: i32, ieee: bool) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp_bits = 7 - man;
    let e = ((b as u32 & 0x7f) >> man) as i32;
    let m = (b as u32 & ((1 << man) - 1)) as f64;
    let e_max = (1 << exp_bits) - 1;
    if ieee && e == e_max {
        return if m == 0.0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    if !ieee && e == e_max && m as u32 == (1 << man) - 1 {
        return f64::NAN;
    }
    let scale = (1u64 << man) as f64;
    if e == 0 {
        sign * m / scale * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + m / scale) * 2f64.powi(e - bias)
    }
}

/// Finite fp8 values in increasing order with their codes (positive and negative).
fn fp8_table(dtype: DataType) -> Vec<(f64, u8)> {
    let mut t: Vec<(f64, u8)> = (0..=255u8)
        .map(|c| (decode(dtype, &[c]), c))
        .filter(|(v, c)| v.is_finite() && *c != 0x80) // one zero: +0
        .collect();
    t.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    t
}

/// f32 → fp8 by nearest-value search over the code table, ties to the even code, saturating:
/// an independent model of `cvt.rn.satfinite`.
pub fn fp8_encode(dtype: DataType, table: &[(f64, u8)], x: f32) -> u8 {
    let x = x as f64;
    if x.is_nan() {
        return 0x7f;
    }
    let i = table.partition_point(|(v, _)| *v < x);
    let pick = if i == 0 {
        table[0]
    } else if i == table.len() {
        table[table.len() - 1]
    } else {
        let (lo, hi) = (table[i - 1], table[i]);
        let (dl, dh) = (x - lo.0, hi.0 - x);
        if dl < dh || (dl == dh && lo.1 & 1 == 0) {
            lo
        } else {
            hi
        }
    };
    let _ = dtype;
    if pick.0 == 0.0 && x.is_sign_negative() {
        0x80
    } else {
        pick.1
    }
}

/// Encodes an f32 into `dtype`'s little-endian bytes with round-to-nearest-even (saturating for
/// fp8), using `half` for f16/bf16 and the table model for fp8.
pub struct Encoder {
    dtype: DataType,
    table: Vec<(f64, u8)>,
}

impl Encoder {
    /// An encoder for `dtype`.
    pub fn new(dtype: DataType) -> Self {
        let table = match dtype {
            DataType::E4m3 | DataType::E5m2 => fp8_table(dtype),
            _ => Vec::new(),
        };
        Self { dtype, table }
    }

    /// Writes `x` as one element into `out`.
    pub fn encode(&self, x: f32, out: &mut [u8]) {
        match self.dtype {
            DataType::F32 => out[..4].copy_from_slice(&x.to_le_bytes()),
            DataType::F16 => out[..2].copy_from_slice(&f16::from_f32(x).to_bits().to_le_bytes()),
            DataType::Bf16 => out[..2].copy_from_slice(&bf16::from_f32(x).to_bits().to_le_bytes()),
            DataType::E4m3 | DataType::E5m2 => out[0] = fp8_encode(self.dtype, &self.table, x),
        }
    }
}

/// `count` random elements of `dtype` suited to `op` (values near 1 for products, so they
/// neither overflow nor vanish; a spread around 0 otherwise).
pub fn random_elements(
    rng: &mut SmallRng,
    dtype: DataType,
    op: ReduceOpKind,
    count: usize,
) -> Vec<u8> {
    let enc = Encoder::new(dtype);
    let size = dtype.size();
    let mut out = vec![0u8; count * size];
    for e in out.chunks_exact_mut(size) {
        let x: f32 = match op {
            ReduceOpKind::Prod => rng.random_range(0.75f32..1.25),
            _ => rng.random_range(-4.0f32..4.0),
        };
        enc.encode(x, e);
    }
    out
}

/// The operators as Purlin documents them (`ReduceOpKind`): max/min ignore a NaN and keep the
/// earlier value when +0 meets -0.
pub fn combine_f32(op: ReduceOpKind, a: f32, b: f32) -> f32 {
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

fn combine_f64(op: ReduceOpKind, a: f64, b: f64) -> f64 {
    match op {
        ReduceOpKind::Sum => a + b,
        ReduceOpKind::Max => a.max(b),
        ReduceOpKind::Min => a.min(b),
        ReduceOpKind::Prod => a * b,
    }
}

/// The f32 rank-order reference: each element accumulated in f32 over the sources in order,
/// rounded once to `dtype`. What every Purlin reduction must match bit for bit. Runs on all
/// cores.
pub fn reference_f32(dtype: DataType, op: ReduceOpKind, srcs: &[&[u8]]) -> Vec<u8> {
    let size = dtype.size();
    let len = srcs[0].len();
    let mut out = vec![0u8; len];
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(32);
    let per = (len / size).div_ceil(threads).max(1) * size;
    std::thread::scope(|scope| {
        for (t, chunk) in out.chunks_mut(per).enumerate() {
            scope.spawn(move || {
                let enc = Encoder::new(dtype);
                let base = t * per;
                for (i, o) in chunk.chunks_exact_mut(size).enumerate() {
                    let at = base + i * size;
                    let mut acc = decode(dtype, &srcs[0][at..]) as f32;
                    for s in &srcs[1..] {
                        acc = combine_f32(op, acc, decode(dtype, &s[at..]) as f32);
                    }
                    enc.encode(acc, o);
                }
            });
        }
    });
    out
}

/// Checks `got` against an f64 accumulation of the sources: each element within one unit in
/// the last place of `dtype` plus the f32 accumulation error bound (saturated fp8 must equal
/// the largest finite value). Returns the number of elements that fail.
pub fn count_wrong_f64(dtype: DataType, op: ReduceOpKind, srcs: &[&[u8]], got: &[u8]) -> usize {
    let size = dtype.size();
    let (mantissa, min_sub, max) = match dtype {
        DataType::F32 => (23, 2f64.powi(-149), f32::MAX as f64),
        DataType::F16 => (10, 2f64.powi(-24), 65504.0),
        DataType::Bf16 => (7, 2f64.powi(-133), bf16::MAX.to_f64()),
        DataType::E4m3 => (3, 2f64.powi(-9), 448.0),
        DataType::E5m2 => (2, 2f64.powi(-16), 57344.0),
    };
    let n = srcs.len() as f64;
    let mut wrong = 0;
    for (i, g) in got.chunks_exact(size).enumerate() {
        let at = i * size;
        let first = decode(dtype, &srcs[0][at..]);
        let (mut exact, mut magnitude) = (first, first.abs());
        for s in &srcs[1..] {
            let x = decode(dtype, &s[at..]);
            exact = combine_f64(op, exact, x);
            magnitude = match op {
                ReduceOpKind::Prod => magnitude * x.abs(),
                _ => magnitude + x.abs(),
            };
        }
        let g = decode(dtype, g);
        let ok = if exact.abs() > max && matches!(dtype, DataType::E4m3 | DataType::E5m2) {
            g.abs() == max && g.signum() == exact.signum()
        } else {
            let ulp =
                (2f64.powi(exact.abs().max(min_sub).log2().floor() as i32 - mantissa)).max(min_sub);
            (g - exact).abs() <= ulp + 4.0 * n * f32::EPSILON as f64 * magnitude
        };
        if !ok {
            wrong += 1;
        }
    }
    wrong
}

/// GPU `0` with the PTX of `arch` (the newest it runs when `None`), or `None` after printing
/// why the calling test is skipped: no driver, no device, or an architecture the device cannot
/// run. Any other failure is a real error and panics.
pub fn gpu_or_skip(
    test: &str,
    arch: Option<purlin::ptx::Arch>,
) -> Option<std::sync::Arc<purlin::Gpu>> {
    let opened = match arch {
        Some(a) => purlin::Gpu::open_arch(0, a),
        None => purlin::Gpu::open(0),
    };
    match opened {
        Ok(gpu) => Some(gpu),
        Err(
            e @ (purlin::Error::NoDriver
            | purlin::Error::NoDevice { .. }
            | purlin::Error::ArchUnsupported { .. }),
        ) => {
            println!("SKIPPED: {test}: {e}");
            eprintln!("SKIPPED: {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: opening the GPU failed: {e}"),
    }
}

/// `count` random elements like [`random_elements`], generated on all cores (large inputs).
pub fn random_elements_parallel(
    seed: u64,
    dtype: DataType,
    op: ReduceOpKind,
    count: usize,
) -> Vec<u8> {
    let size = dtype.size();
    let mut out = vec![0u8; count * size];
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(32);
    let per = count.div_ceil(threads).max(1) * size;
    std::thread::scope(|scope| {
        for (t, chunk) in out.chunks_mut(per).enumerate() {
            scope.spawn(move || {
                let mut rng =
                    SmallRng::seed_from_u64(seed ^ (t as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                chunk.copy_from_slice(&random_elements(&mut rng, dtype, op, chunk.len() / size));
            });
        }
    });
    out
}

/// The device address of a cudarc allocation.
pub fn device_addr<T>(
    buf: &cudarc::driver::CudaSlice<T>,
    stream: &cudarc::driver::CudaStream,
) -> u64 {
    use cudarc::driver::DevicePtr;
    let (addr, _sync) = buf.device_ptr(stream);
    addr
}

/// What the emulated ranks' buffers are to each other: ordinary (staged), symmetric (every
/// call gets the tables of every rank's buffers), or ordinary buffers the peers reach (ranks
/// of one process: the calls exchange their addresses), optionally but one rank's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffers {
    /// Ordinary buffers, staged.
    Ordinary,
    /// Symmetric buffers.
    Symmetric,
    /// Ordinary buffers every peer reaches, but for the named rank's.
    Reached(Option<u32>),
}

impl Buffers {
    /// `builder` with these buffers.
    pub fn apply(
        self,
        builder: purlin_device::emulation::CommunicatorBuilder,
    ) -> purlin_device::emulation::CommunicatorBuilder {
        match self {
            Buffers::Ordinary => builder,
            Buffers::Symmetric => builder.symmetric_buffers(true),
            Buffers::Reached(except) => builder.peers_reach(true, except),
        }
    }

    /// Ordinary buffers the peers reach, but for one random rank's one time in three.
    pub fn reached(rng: &mut SmallRng, world: u32) -> Self {
        use rand::RngExt;
        Buffers::Reached(
            rng.random_bool(1.0 / 3.0)
                .then(|| rng.random_range(0..world)),
        )
    }
}
