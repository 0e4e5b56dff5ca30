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
use purlin_device::collective::InPlace;
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
    product(what, count, elem_size as u64, "elements")
}

/// `n × size` bytes of `n` `things` of `size` bytes each, or the error naming `what`.
fn product(what: &'static str, n: u64, size: u64, things: &str) -> Result<u64> {
    n.checked_mul(size).ok_or_else(|| Error::InvalidArgument {
        what,
        reason: format!("{n} {things} of {size} bytes overflow a 64-bit size"),
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

/// `bytes × parts`, or [`Error::InvalidArgument`] naming `what` when it overflows 64 bits.
///
/// ```
/// use purlin::validate::parts_to_bytes;
/// assert_eq!(parts_to_bytes("src", 1024, 8)?, 8192);
/// assert!(parts_to_bytes("src", u64::MAX / 2, 4).is_err());
/// # Ok::<(), purlin::Error>(())
/// ```
pub fn parts_to_bytes(what: &'static str, bytes: u64, parts: u32) -> Result<u64> {
    product(what, parts as u64, bytes, "parts")
}

/// How a collective's input and output may share memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aliasing {
    /// Not at all (AllToAll, AllToAllV).
    Disjoint,
    /// Exactly the same range, or none of it (AllReduce).
    SameOrDisjoint,
    /// The input may be exactly the part at `offset` of the output (in-place AllGather), else
    /// disjoint.
    InputIsPartOfOutput {
        /// Where the input sits in the output, bytes.
        offset: u64,
    },
    /// The output may be exactly the part at `offset` of the input (in-place
    /// ReduceScatter), else disjoint.
    OutputIsPartOfInput {
        /// Where the output sits in the input, bytes.
        offset: u64,
    },
    /// The V forms, whose part offsets live on the device: the input may lie inside the
    /// output (AllGatherV) or the output inside the input (ReduceScatterV); the kernel checks
    /// the exact place.
    Inside {
        /// True when the input lies in the output (AllGatherV), false for the reverse.
        input_in_output: bool,
    },
}

impl Aliasing {
    /// The rule of a collective whose in-place form is `in_place`, for a call whose own part
    /// lies at `part` bytes (fixed-size forms), or anywhere (`None`: the V forms, whose part
    /// offsets live on the device).
    ///
    /// ```
    /// use purlin::collective::CollectiveKind;
    /// use purlin::validate::Aliasing;
    /// let ag = CollectiveKind::AllGather.semantics().in_place;
    /// assert_eq!(Aliasing::of(ag, Some(64)), Aliasing::InputIsPartOfOutput { offset: 64 });
    /// assert_eq!(Aliasing::of(ag, None), Aliasing::Inside { input_in_output: true });
    /// ```
    pub const fn of(in_place: InPlace, part: Option<u64>) -> Self {
        match (in_place, part) {
            (InPlace::Never, _) => Self::Disjoint,
            (InPlace::Same, _) => Self::SameOrDisjoint,
            (InPlace::InputIsOwnPart, Some(offset)) => Self::InputIsPartOfOutput { offset },
            (InPlace::OutputIsOwnPart, Some(offset)) => Self::OutputIsPartOfInput { offset },
            (InPlace::InputIsOwnPart, None) => Self::Inside {
                input_in_output: true,
            },
            (InPlace::OutputIsOwnPart, None) => Self::Inside {
                input_in_output: false,
            },
        }
    }
}

/// Refuses `src` (`src_bytes` used) and `dst` (`dst_bytes` used) sharing memory other than
/// the way `rule` allows.
///
/// ```
/// use purlin::memory::Span;
/// use purlin::validate::{check_aliasing, Aliasing};
/// let buf = Span::new(0x1000, 4096);
/// // In-place AllGather: rank 1's input is part 1 of the output.
/// let part = Span::new(0x1000 + 1024, 1024);
/// assert!(check_aliasing(part, 1024, buf, 4096, Aliasing::InputIsPartOfOutput { offset: 1024 }).is_ok());
/// assert!(check_aliasing(part, 1024, buf, 4096, Aliasing::InputIsPartOfOutput { offset: 0 }).is_err());
/// assert!(check_aliasing(buf, 4096, buf, 4096, Aliasing::Disjoint).is_err());
/// assert!(check_aliasing(buf, 4096, buf, 4096, Aliasing::SameOrDisjoint).is_ok());
/// ```
pub fn check_aliasing(
    src: Span,
    src_bytes: u64,
    dst: Span,
    dst_bytes: u64,
    rule: Aliasing,
) -> Result<()> {
    let overlap = src_bytes > 0
        && dst_bytes > 0
        && src.addr < dst.addr.saturating_add(dst_bytes)
        && dst.addr < src.addr.saturating_add(src_bytes);
    if !overlap {
        return Ok(());
    }
    let allowed = match rule {
        Aliasing::Disjoint => false,
        Aliasing::SameOrDisjoint => src.addr == dst.addr && src_bytes == dst_bytes,
        Aliasing::InputIsPartOfOutput { offset } => dst.addr.checked_add(offset) == Some(src.addr),
        Aliasing::OutputIsPartOfInput { offset } => src.addr.checked_add(offset) == Some(dst.addr),
        Aliasing::Inside {
            input_in_output: true,
        } => src.addr >= dst.addr && src.addr + src_bytes <= dst.addr + dst_bytes,
        Aliasing::Inside {
            input_in_output: false,
        } => dst.addr >= src.addr && dst.addr + dst_bytes <= src.addr + src_bytes,
    };
    if allowed {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            what: "dst",
            reason: format!(
                "the output [{:#x}, +{dst_bytes}) overlaps the input [{:#x}, +{src_bytes}) in a way this collective does not allow ({rule:?})",
                dst.addr, src.addr
            ),
        })
    }
}
