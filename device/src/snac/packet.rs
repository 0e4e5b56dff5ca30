//! 16-byte latency packets: 8 bytes of payload and the flag, written by one 16-byte store and
//! polled by 16-byte loads until the flag matches, so a reader needs no separate signal.
//!
//! The PTX memory model makes 8-byte accesses single-copy atomic, not 16-byte vector ones.
//! So, as NCCL's LL protocol does, each 8-byte half of a packet carries its own copy of the
//! flag next to 4 bytes of payload: `[payload lo | flag, payload hi | flag]`. A reader that sees
//! the flag in both halves has the whole payload, however the store was split.
//!
//! ```
//! use purlin_device::snac::packet;
//! let f = packet::flag32(41);
//! let p = packet::encode(0x1122_3344_5566_7788, f);
//! assert_eq!(packet::decode(p, f), Ok(0x1122_3344_5566_7788));
//! assert!(packet::decode(p, packet::flag32(42)).is_err());
//! assert!(packet::decode([0, 0], f).is_err()); // zeroed memory never matches
//! ```

use crate::arch;

/// The 32-bit packet flag of a call at epoch `e`: never 0 (zeroed memory never matches) and
/// different for consecutive calls. Stale packets in a half come from two calls back.
#[inline(always)]
pub const fn flag32(e: u64) -> u32 {
    ((e + 1) % 0xffff_ffff) as u32 + 1
}

/// The two 8-byte words of a packet carrying `payload`.
#[inline(always)]
pub const fn encode(payload: u64, flag: u32) -> [u64; 2] {
    let f = (flag as u64) << 32;
    [(payload & 0xffff_ffff) | f, (payload >> 32) | f]
}

/// The payload of a packet if both halves carry `flag`; else the flag seen (for diagnosis).
#[inline(always)]
pub const fn decode(words: [u64; 2], flag: u32) -> Result<u64, u64> {
    let (f0, f1) = ((words[0] >> 32) as u32, (words[1] >> 32) as u32);
    if f0 == flag && f1 == flag {
        Ok((words[0] & 0xffff_ffff) | (words[1] << 32))
    } else if f0 != flag {
        Err(f0 as u64)
    } else {
        Err(f1 as u64)
    }
}

/// Writes a packet.
///
/// # Safety
/// `p` is a valid, 16-byte aligned packet slot in (peer or local) global memory.
#[inline(always)]
pub unsafe fn put(p: *mut u8, payload: u64, flag: u32) {
    // SAFETY: the caller guarantees the slot.
    unsafe { arch::st_volatile_v2_u64(p as *mut [u64; 2], encode(payload, flag)) }
}

/// Reads a packet once: its payload if it carries `flag`, else the flag seen.
///
/// # Safety
/// `p` is a valid, 16-byte aligned packet slot in global memory.
#[inline(always)]
pub unsafe fn try_get(p: *const u8, flag: u32) -> Result<u64, u64> {
    // SAFETY: the caller guarantees the slot.
    decode(
        unsafe { arch::ld_volatile_v2_u64(p as *const [u64; 2]) },
        flag,
    )
}

/// Reads the two packets of one 16-byte unit (`p` and `p + 16`), both loads issued before
/// either is decoded: the unit if both carry `flag`, else the flag seen.
///
/// # Safety
/// `p` is a valid, 16-byte aligned slot of two packets in global memory.
#[inline(always)]
pub unsafe fn try_get_unit(p: *const u8, flag: u32) -> Result<u128, u64> {
    // SAFETY: the caller guarantees both slots.
    decode_unit(unsafe { load_pair(p) }, flag)
}

/// Loads the two packets of a 16-byte unit (at `p` and `p + 16`), both loads issued before
/// either is used.
///
/// # Safety
/// As [`try_get_unit`].
#[inline(always)]
pub unsafe fn load_pair(p: *const u8) -> [[u64; 2]; 2] {
    // SAFETY: the caller guarantees both slots.
    unsafe {
        [
            arch::ld_volatile_v2_u64(p as *const [u64; 2]),
            arch::ld_volatile_v2_u64(p.add(16) as *const [u64; 2]),
        ]
    }
}

/// A 16-byte unit from its two packets as loaded (low half first), if both carry `flag`; else
/// the flag seen.
///
/// ```
/// use purlin_device::snac::packet::{decode_unit, encode};
/// let packets = [encode(7, 5), encode(1, 5)];
/// assert_eq!(decode_unit(packets, 5), Ok(7 | 1 << 64));
/// assert_eq!(decode_unit(packets, 6), Err(5));
/// ```
#[inline(always)]
pub const fn decode_unit(packets: [[u64; 2]; 2], flag: u32) -> Result<u128, u64> {
    match (decode(packets[0], flag), decode(packets[1], flag)) {
        (Ok(lo), Ok(hi)) => Ok(lo as u128 | (hi as u128) << 64),
        (Err(seen), _) | (_, Err(seen)) => Err(seen),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_and_stale_flags_never_match(payload: u64, e in 0u64..u64::MAX - 4) {
            let f = flag32(e);
            prop_assert_ne!(f, 0);
            prop_assert_eq!(decode(encode(payload, f), f), Ok(payload));
            // The previous two calls' packets (same half, or the other) never match.
            prop_assert_ne!(flag32(e + 1), f);
            prop_assert_ne!(flag32(e + 2), f);
            prop_assert!(decode(encode(payload, flag32(e + 2)), f).is_err());
            // A torn packet (halves from two calls) never matches either call.
            let (old, new) = (encode(payload, flag32(e + 2)), encode(!payload, f));
            prop_assert!(decode([old[0], new[1]], f).is_err());
            prop_assert!(decode([new[0], old[1]], f).is_err());
        }
    }
}
