//! Element types the datapath moves and reduces, and how each converts to and from the `f32`
//! that every reduction accumulates in.
//!
//! A 16-byte vector holds [`Element::LANES`] elements; [`Element::unpack`] widens one vector to
//! `f32` lanes and [`Element::pack`] narrows it back with round-to-nearest-even. Vector and
//! scalar paths convert element by element in the same way, so a result never depends on
//! which path produced it.
//!
//! ```
//! use purlin_device::element::{DataType, E4m3, Element};
//! assert_eq!(E4m3::from_f32(1.0).to_f32(), 1.0);
//! assert_eq!(E4m3::from_f32(1.0e9).to_f32(), 448.0); // saturates to the largest finite value
//! assert_eq!(<half::bf16 as Element>::DTYPE, DataType::Bf16);
//! ```

use crate::arch;
use half::{bf16, f16};

wire_enum! {
    /// The element types Purlin reduces, as a run-time value (kernel argument, CLI flag, table
    /// key).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum DataType {
        /// IEEE binary32.
        F32 = 0 => "float",
        /// IEEE binary16.
        F16 = 1 => "half",
        /// bfloat16.
        Bf16 = 2 => "bfloat16",
        /// OCP FP8 E4M3 (no infinities, saturating).
        E4m3 = 3 => "f8e4m3",
        /// OCP FP8 E5M2 (saturating).
        E5m2 = 4 => "f8e5m2",
    }

    /// The short name nccl-tests prints (`float`, `half`, `bfloat16`, `f8e4m3`, `f8e5m2`).
    pub const fn name(self) -> &'static str;
}

impl DataType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
            Self::E4m3 | Self::E5m2 => 1,
        }
    }
}

/// An element type: its size, its `f32` conversions, and its 16-byte vector form.
pub trait Element: Copy + Send + Sync + 'static {
    /// The run-time tag of this type.
    const DTYPE: DataType;
    /// Elements in one 16-byte vector.
    const LANES: usize;
    /// One vector widened to `f32`: `[f32; LANES]`.
    type Lanes: Copy + Default + AsRef<[f32]> + AsMut<[f32]>;
    /// Widens to `f32` (exact for every type here).
    fn to_f32(self) -> f32;
    /// Narrows from `f32`, rounding to nearest even (saturating for fp8).
    fn from_f32(v: f32) -> Self;
    /// Widens a 16-byte vector to `f32` lanes.
    fn unpack(v: u128) -> Self::Lanes;
    /// Narrows `f32` lanes to a 16-byte vector.
    fn pack(lanes: Self::Lanes) -> u128;
    /// The element's bits, zero-extended.
    fn to_bits_u32(self) -> u32;
    /// The element with these bits (the low `size` bytes).
    fn from_bits_u32(bits: u32) -> Self;
}

/// Implements [`Element`] for `$ty` (`DataType::$dtype`): `$lanes` lanes of `$bits`-bit
/// `$uint` in a 16-byte vector; `bits`/`from_bits` give and take the raw `$uint`, `to_f32` and
/// `from_f32` widen and narrow.
macro_rules! element {
    (
        $ty:ident = $dtype:ident, $lanes:literal lanes of $bits:literal-bit $uint:ty,
        bits: |$s:ident| $to_bits:expr, from_bits: |$raw:ident| $from_bits:expr,
        to_f32: |$x:ident| $to_f32:expr, from_f32: |$v:ident| $from_f32:expr $(,)?
    ) => {
        impl Element for $ty {
            const DTYPE: DataType = DataType::$dtype;
            const LANES: usize = $lanes;
            type Lanes = [f32; $lanes];
            #[inline(always)]
            fn to_f32(self) -> f32 {
                let $x = self;
                $to_f32
            }
            #[inline(always)]
            fn from_f32($v: f32) -> Self {
                $from_f32
            }
            #[inline(always)]
            fn unpack(v: u128) -> [f32; $lanes] {
                let mut out = [0.0f32; $lanes];
                let mut i = 0;
                while i < $lanes {
                    // The trait's conversion, not an inherent one of the same name (`half`'s
                    // `bf16::to_f32` is software NaN quieting, `f16::to_f32` a software
                    // conversion where the trait's is one `cvt`).
                    out[i] = <Self as Element>::to_f32(Self::from_bits_u32(
                        ((v >> (i * $bits)) as $uint) as u32,
                    ));
                    i += 1;
                }
                out
            }
            #[inline(always)]
            fn pack(lanes: [f32; $lanes]) -> u128 {
                let mut v = 0u128;
                let mut i = 0;
                while i < $lanes {
                    let narrow = <Self as Element>::from_f32(lanes[i]);
                    v |= ((narrow.to_bits_u32() as $uint) as u128) << (i * $bits);
                    i += 1;
                }
                v
            }
            #[inline(always)]
            fn to_bits_u32(self) -> u32 {
                let $s = self;
                let raw: $uint = $to_bits;
                raw as u32
            }
            #[inline(always)]
            fn from_bits_u32(bits: u32) -> Self {
                let $raw = bits as $uint;
                $from_bits
            }
        }
    };
}

element! {
    f32 = F32, 4 lanes of 32-bit u32,
    bits: |x| x.to_bits(), from_bits: |raw| f32::from_bits(raw),
    to_f32: |x| x, from_f32: |v| v,
}

element! {
    f16 = F16, 8 lanes of 16-bit u16,
    bits: |x| x.to_bits(), from_bits: |raw| f16::from_bits(raw),
    to_f32: |x| arch::f16_to_f32(x.to_bits()), from_f32: |v| f16::from_bits(arch::f32_to_f16(v)),
}

element! {
    bf16 = Bf16, 8 lanes of 16-bit u16,
    bits: |x| x.to_bits(), from_bits: |raw| bf16::from_bits(raw),
    to_f32: |x| f32::from_bits((x.to_bits() as u32) << 16),
    from_f32: |v| bf16::from_bits(f32_to_bf16_bits(v)),
}

/// `f32` → bf16 bits, round to nearest even: the `cvt.rn.bf16.f32` instruction where the
/// architecture has it (sm_80 and later, and the host), the same rounding in integer
/// arithmetic on sm_70.
#[inline(always)]
fn f32_to_bf16_bits(v: f32) -> u16 {
    #[cfg(any(not(target_arch = "nvptx64"), target_feature = "sm_80"))]
    {
        arch::f32_to_bf16(v)
    }
    #[cfg(all(target_arch = "nvptx64", not(target_feature = "sm_80")))]
    {
        let bits = v.to_bits();
        if v.is_nan() {
            0x7fff
        } else {
            ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) as u16
        }
    }
}

/// OCP FP8 E4M3 (`e4m3fn`): 4 exponent bits (bias 7), 3 mantissa bits, no infinities, one NaN
/// pattern per sign. Conversions from `f32` round to nearest even and saturate to ±448.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct E4m3(pub u8);

/// OCP FP8 E5M2: 5 exponent bits (bias 15), 2 mantissa bits (the top byte of an IEEE f16).
/// Conversions from `f32` round to nearest even and saturate to ±57344.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct E5m2(pub u8);

/// 2^k as an `f32`, for normal exponents.
#[inline(always)]
const fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// `f32` → fp8 with `man` mantissa bits and exponent `bias`: round to nearest even, saturate
/// to `max_code` (the largest finite magnitude), NaN to `nan_code`.
#[inline(always)]
fn f32_to_fp8(v: f32, man: u32, bias: i32, max_code: u32, nan_code: u8) -> u8 {
    let bits = v.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let magnitude = bits & 0x7fff_ffff;
    let a = f32::from_bits(magnitude);
    if a.is_nan() {
        return sign | nan_code;
    }
    let emin = 1 - bias;
    let code = if a < pow2(emin) {
        // Subnormal: count units of 2^(emin - man); adding and removing 2^23 rounds to the
        // nearest integer, ties to even, in the FPU's default mode.
        let units = a * pow2(man as i32 - emin);
        ((units + 8_388_608.0) - 8_388_608.0) as u32
    } else {
        let shift = 23 - man;
        let rounded = (magnitude + (1 << (shift - 1)) - 1 + ((magnitude >> shift) & 1)) >> shift;
        rounded - (((127 - bias) as u32) << man)
    };
    sign | (if code > max_code { max_code } else { code }) as u8
}

impl E4m3 {
    /// Narrows from `f32` (round to nearest even, saturating).
    #[inline(always)]
    pub fn from_f32(v: f32) -> Self {
        Self(f32_to_fp8(v, 3, 7, 0x7e, 0x7f))
    }

    /// Widens to `f32` (exact).
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        let exponent = ((self.0 >> 3) & 0xf) as u32;
        let mantissa = (self.0 & 7) as u32;
        let magnitude = if exponent == 0xf && mantissa == 7 {
            f32::NAN
        } else if exponent == 0 {
            mantissa as f32 * pow2(-9)
        } else {
            f32::from_bits(((exponent + 120) << 23) | (mantissa << 20))
        };
        if self.0 & 0x80 != 0 {
            -magnitude
        } else {
            magnitude
        }
    }
}

impl E5m2 {
    /// Narrows from `f32` (round to nearest even, saturating).
    #[inline(always)]
    pub fn from_f32(v: f32) -> Self {
        Self(f32_to_fp8(v, 2, 15, 0x7b, 0x7f))
    }

    /// Widens to `f32` (exact).
    #[inline(always)]
    pub fn to_f32(self) -> f32 {
        arch::f16_to_f32((self.0 as u16) << 8)
    }
}

element! {
    E4m3 = E4m3, 16 lanes of 8-bit u8,
    bits: |x| x.0, from_bits: |raw| E4m3(raw),
    to_f32: |x| E4m3::to_f32(x), from_f32: |v| E4m3::from_f32(v),
}

element! {
    E5m2 = E5m2, 16 lanes of 8-bit u8,
    bits: |x| x.0, from_bits: |raw| E5m2(raw),
    to_f32: |x| E5m2::to_f32(x), from_f32: |v| E5m2::from_f32(v),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every bit pattern of a 16-bit type, through the vector path and the scalar one.
    fn vector_and_scalar_agree<T: Element>() {
        for base in (0..=u16::MAX as u32).step_by(8) {
            let mut v = 0u128;
            for i in 0..8 {
                v |= ((base + i) as u128) << (16 * i);
            }
            let lanes = T::unpack(v);
            for (i, lane) in lanes.as_ref().iter().enumerate() {
                let scalar = T::from_bits_u32(base + i as u32).to_f32();
                assert_eq!(
                    lane.to_bits(),
                    scalar.to_bits(),
                    "bits {:#06x}",
                    base + i as u32
                );
            }
            let scalar: u128 = (0..8)
                .map(|i| (T::from_f32(lanes.as_ref()[i]).to_bits_u32() as u128) << (16 * i))
                .fold(0, |a, b| a | b);
            assert_eq!(T::pack(lanes), scalar, "bits {base:#06x}..");
        }
    }

    #[test]
    fn vectors_convert_like_scalars_for_every_16_bit_pattern() {
        vector_and_scalar_agree::<bf16>();
        vector_and_scalar_agree::<f16>();
    }

    #[test]
    fn e4m3_round_trips_every_finite_code() {
        for code in 0..=255u8 {
            let x = E4m3(code);
            if x.to_f32().is_nan() {
                continue;
            }
            let back = E4m3::from_f32(x.to_f32());
            // -0 and +0 are distinct codes that both round-trip.
            assert_eq!(back, x, "code {code:#x} -> {} -> {:#x}", x.to_f32(), back.0);
        }
    }

    #[test]
    fn e5m2_round_trips_every_finite_code() {
        for code in 0..=255u8 {
            let x = E5m2(code);
            if !x.to_f32().is_finite() {
                continue;
            }
            assert_eq!(E5m2::from_f32(x.to_f32()), x, "code {code:#x}");
        }
    }

    #[test]
    fn fp8_saturates_and_rounds_to_even() {
        assert_eq!(E4m3::from_f32(f32::INFINITY).to_f32(), 448.0);
        assert_eq!(E4m3::from_f32(-1.0e6).to_f32(), -448.0);
        assert_eq!(E4m3::from_f32(464.0).to_f32(), 448.0);
        assert_eq!(E5m2::from_f32(1.0e9).to_f32(), 57344.0);
        // 1 + 1/16 lies halfway between 1 and 1.125 in e4m3: ties go to the even mantissa (1.0).
        assert_eq!(E4m3::from_f32(1.0625).to_f32(), 1.0);
        assert_eq!(E4m3::from_f32(1.1875).to_f32(), 1.25);
        // Smallest subnormal is 2^-9; half of it ties to 0.
        assert_eq!(E4m3::from_f32(2.0f32.powi(-10)).to_f32(), 0.0);
        assert_eq!(
            E4m3::from_f32(1.5 * 2.0f32.powi(-9)).to_f32(),
            2.0f32.powi(-8)
        );
        assert!(E4m3::from_f32(f32::NAN).to_f32().is_nan());
    }

    #[test]
    fn fp8_from_f32_is_nearest() {
        // Against a brute-force nearest search over all finite codes.
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let x = ((rng >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32 * 500.0;
            let got = E4m3::from_f32(x).to_f32();
            let best = (0..=255u8)
                .map(|c| E4m3(c).to_f32())
                .filter(|v| v.is_finite())
                .map(|v| (v - x).abs())
                .fold(f32::INFINITY, f32::min);
            assert!(
                (got - x).abs() <= best,
                "{x}: got {got}, nearest is {best} away"
            );
        }
    }

    #[test]
    fn bf16_and_f16_match_half() {
        for x in [0.0f32, -1.5, 2.7182817, 65504.0, 1.0e-7, 1.0e30] {
            assert_eq!(
                bf16::from_f32(x).to_bits(),
                <bf16 as Element>::from_f32(x).to_bits()
            );
            assert_eq!(
                f16::from_f32(x).to_bits(),
                <f16 as Element>::from_f32(x).to_bits()
            );
        }
    }

    #[test]
    fn pack_inverts_unpack() {
        let v = 0x0123_4567_89ab_cdef_0f1e_2d3c_4b5a_6978u128
            & !0x8080_8080_8080_8080_8080_8080_8080_8080;
        assert_eq!(f32::pack(f32::unpack(v)), v);
        assert_eq!(bf16::pack(bf16::unpack(v)), v);
        assert_eq!(f16::pack(f16::unpack(v)), v);
    }
}
