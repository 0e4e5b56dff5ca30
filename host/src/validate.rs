//! Argument checks, as pure functions: every host call runs the checks that apply to it
//! before it touches a device, so bad input returns an [`Error`] and never launches. Being
//! pure, they are tested on machines without a GPU.
//!
//! ```
//! use purlin::validate;
//! use purlin::memory::Span;
//! assert!(validate::check_rank(3, 4).is_ok());
//! assert!(validate::check_rank(4, 4).is_err());
//! assert_eq!(validate::check_count(12, 4)?, 3);
//! assert!(validate::check_buffer("dst", Span::new(0x1000, 64), 128, 16).is_err());
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::memory::Span;
use purlin_device::context::MAX_RANKS;

pub use crate::error::check_pointer;

/// `rank` must lie in `0..world`.
///
/// ```
/// use purlin::{Error, validate::check_rank};
/// assert!(matches!(check_rank(2, 2), Err(Error::RankOutOfRange { rank: 2, world: 2 })));
/// ```
pub fn check_rank(rank: u32, world: u32) -> Result<()> {
    if rank >= world {
        return Err(Error::RankOutOfRange { rank, world });
    }
    Ok(())
}

/// `world` must lie in `1..=MAX_RANKS`.
///
/// ```
/// use purlin::validate::check_world;
/// assert!(check_world(16).is_ok());
/// assert!(check_world(17).is_err() && check_world(0).is_err());
/// ```
pub fn check_world(world: u32) -> Result<()> {
    if world == 0 || world as usize > MAX_RANKS {
        return Err(Error::WorldSize {
            world,
            max: MAX_RANKS,
        });
    }
    Ok(())
}

/// `world` must be supported and equal the bootstrap's world; `rank` must lie inside it and
/// equal the bootstrap's rank.
///
/// ```
/// use purlin::{Error, validate::check_membership};
/// assert!(check_membership(1, 4, 1, 4).is_ok());
/// assert!(matches!(check_membership(1, 2, 1, 4), Err(Error::WorldMismatch { world: 2, bootstrap: 4 })));
/// assert!(matches!(check_membership(0, 4, 1, 4), Err(Error::InvalidArgument { what: "rank", .. })));
/// ```
pub fn check_membership(
    rank: u32,
    world: u32,
    bootstrap_rank: u32,
    bootstrap_world: u32,
) -> Result<()> {
    check_world(world)?;
    check_rank(rank, world)?;
    if world != bootstrap_world {
        return Err(Error::WorldMismatch {
            world,
            bootstrap: bootstrap_world,
        });
    }
    if rank != bootstrap_rank {
        return Err(Error::InvalidArgument {
            what: "rank",
            reason: format!("{rank} is not the bootstrap's rank {bootstrap_rank}"),
        });
    }
    Ok(())
}

/// `bytes` must be a whole number of `elem_size`-byte elements; returns the element count.
///
/// ```
/// use purlin::{Error, validate::check_count};
/// assert_eq!(check_count(0, 2).unwrap(), 0);
/// assert!(matches!(check_count(6, 4), Err(Error::PartialElement { bytes: 6, elem_size: 4 })));
/// ```
pub fn check_count(bytes: u64, elem_size: usize) -> Result<u64> {
    if elem_size == 0 || !bytes.is_multiple_of(elem_size as u64) {
        return Err(Error::PartialElement { bytes, elem_size });
    }
    Ok(bytes / elem_size as u64)
}

/// `count` elements of `elem_size` bytes, as bytes (refusing an overflow).
///
/// ```
/// assert_eq!(purlin::validate::elements_to_bytes("count", 3, 4).unwrap(), 12);
/// assert!(purlin::validate::elements_to_bytes("count", u64::MAX, 2).is_err());
/// ```
pub fn elements_to_bytes(what: &'static str, count: u64, elem_size: usize) -> Result<u64> {
    count
        .checked_mul(elem_size as u64)
        .ok_or_else(|| Error::InvalidArgument {
            what,
            reason: format!("{count} elements of {elem_size} bytes overflow a 64-bit size"),
        })
}

/// A buffer a call uses `needed` bytes of: non-null and `align`-aligned (when `needed > 0`),
/// and at least `needed` bytes long.
///
/// ```
/// use purlin::{Error, memory::Span, validate::check_buffer};
/// assert!(check_buffer("src", Span::new(0x1000, 64), 64, 16).is_ok());
/// assert!(check_buffer("src", Span::new(0, 0), 0, 16).is_ok()); // nothing to touch
/// assert!(matches!(check_buffer("src", Span::new(0, 64), 64, 16), Err(Error::NullPointer { what: "src" })));
/// assert!(matches!(check_buffer("src", Span::new(0x1001, 64), 64, 16), Err(Error::Misaligned { .. })));
/// assert!(matches!(check_buffer("src", Span::new(0x1000, 32), 64, 16), Err(Error::BufferTooSmall { needed: 64, available: 32, .. })));
/// ```
pub fn check_buffer(what: &'static str, span: Span, needed: u64, align: u64) -> Result<()> {
    if needed == 0 {
        return Ok(());
    }
    check_pointer(what, span.addr, align)?;
    if span.bytes < needed {
        return Err(Error::BufferTooSmall {
            what,
            needed,
            available: span.bytes,
        });
    }
    Ok(())
}

/// The range `offset..offset + bytes` must fit in a buffer of `size` bytes.
///
/// ```
/// use purlin::{Error, validate::check_range};
/// assert!(check_range("window", 16, 16, 32).is_ok());
/// assert!(matches!(check_range("window", 17, 16, 32), Err(Error::BufferTooSmall { needed: 33, .. })));
/// ```
pub fn check_range(what: &'static str, offset: u64, bytes: u64, size: u64) -> Result<()> {
    let needed = offset.saturating_add(bytes);
    if needed > size {
        return Err(Error::BufferTooSmall {
            what,
            needed,
            available: size,
        });
    }
    Ok(())
}

/// Every GPU in `peers` must be `me` or reachable from it (`can_access(me, peer)`); the first
/// that is not gives [`Error::PeerUnreachable`].
///
/// ```
/// use purlin::{Error, validate::check_reachable};
/// let nvlink = |a: usize, b: usize| a / 4 == b / 4; // two islands of four GPUs
/// assert!(check_reachable(1, &[0, 1, 2, 3], nvlink).is_ok());
/// assert!(matches!(check_reachable(1, &[0, 5], nvlink), Err(Error::PeerUnreachable { from: 1, to: 5 })));
/// ```
pub fn check_reachable(
    me: usize,
    peers: &[usize],
    can_access: impl Fn(usize, usize) -> bool,
) -> Result<()> {
    match peers.iter().find(|&&p| p != me && !can_access(me, p)) {
        Some(&to) => Err(Error::PeerUnreachable { from: me, to }),
        None => Ok(()),
    }
}
