//! The call digest: what every rank's call must agree on, posted by each rank to every peer at
//! entry (four latency packets in the peer's signal array) and compared by the receiver, so a
//! disagreement is a fault naming both ranks and the field at once rather than a silent wrong
//! result or a timeout.
//!
//! Packets: `shape` (what the call runs, element, operator, mode, algorithm, blocks), `size`
//! (bytes of a fixed-size call, `max_count` of a V call), `plan` (a hash of the plan's knobs
//! and of the workspace layout) and `counts`: by default a hash of the counts every rank holds
//! alike in its low 32 bits (0 for a fixed-size call) and the identity of the call's symmetric
//! buffers in its high 32 ([`SnacArgs::buffers`](super::SnacArgs::buffers), 0 for ordinary
//! ones); a call whose shape carries [`PER_PAIR_COUNTS`] posts to each receiver the count it
//! sends it, which must equal what the receiver expects from it.
//!
//! ```
//! use purlin_device::snac::digest::{compare, shape};
//! use purlin_device::snac::{CallKind, DigestField};
//! let a = [shape(CallKind(1), 0x81, 1, 0, 0, 8), 4096, 7, 0];
//! let mut b = a;
//! b[0] = shape(CallKind(1), 0x81, 2, 0, 0, 8);
//! assert_eq!(compare(&a, &b).map(|m| m.0), Some(DigestField::Operator));
//! b = a;
//! b[1] = 8192;
//! assert_eq!(compare(&a, &b), Some((DigestField::Size, 4096, 8192)));
//! b = a;
//! b[0] |= purlin_device::snac::digest::EXCHANGES_ADDRESSES;
//! assert_eq!(compare(&a, &b), Some((DigestField::Buffers, 0, 1)));
//! assert_eq!(compare(&a, &a), None);
//! ```

use super::Plan;
use super::fault::{CallKind, DigestField};
use crate::context::Context;

/// The digest's packets in the order they are posted.
pub type Digest = [u64; crate::context::ARRIVAL_PACKETS];

/// `counts` packet value of a per-pair digest ([`PER_PAIR_COUNTS`]): the receiver compares the
/// count the sender sends it instead of the packet as posted.
pub const PER_PAIR: u64 = u64::MAX;

/// A flag of the `shape` packet: the `counts` packets are per pair (each sender posts to each
/// receiver the count it sends it) rather than the same for every peer.
pub const PER_PAIR_COUNTS: u64 = 1 << 40;

/// A flag of the `shape` packet: the call exchanges its ordinary buffers' addresses at entry
/// (see [`PeersReach`](super::PeersReach)). Every rank must, or none (a rank that stages would
/// never send the addresses its peers wait for): a difference is named as the buffers.
pub const EXCHANGES_ADDRESSES: u64 = 1 << 41;

/// The `shape` packet: what the call runs, element code, operator code, mode, algorithm (one
/// byte each), blocks (16 bits); flags such as [`PER_PAIR_COUNTS`] and
/// [`EXCHANGES_ADDRESSES`] are or-ed in by the caller.
#[inline(always)]
pub const fn shape(
    kind: CallKind,
    element: u8,
    operator: u8,
    mode: u32,
    algorithm: u32,
    blocks: u32,
) -> u64 {
    (kind.0 as u64)
        | ((element as u64) << 8)
        | ((operator as u64) << 16)
        | (((mode & 0xff) as u64) << 24)
        | (((algorithm & 0xff) as u64) << 32)
        | (((blocks & 0xffff) as u64) << 48)
}

/// FNV-1a over 64-bit words, folded to 32 bits.
#[inline(always)]
pub(crate) const fn hash(words: &[u64]) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < words.len() {
        h = (h ^ words[i]).wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    (h ^ (h >> 32)) as u32
}

/// V count `index`'s share of the `counts` packet: the count and its index mixed (splitmix64's
/// finaliser), so that the sum of every count's share, which a block's threads make at once
/// and add up in any order, changes with any count and with their order. (Hashing the counts
/// one after another left the block waiting for one thread's chain of multiplications.)
///
/// ```
/// use purlin_device::snac::digest::{count_share, counts_packet};
/// let of = |c: &[u64]| counts_packet(c.iter().enumerate().fold(0u64, |s, (i, &c)| {
///     s.wrapping_add(count_share(i, c))
/// }));
/// assert_ne!(of(&[1, 2]), of(&[2, 1]));
/// assert_ne!(of(&[0, 0]), of(&[0, 0, 0]));
/// assert_eq!(of(&[3, 4]) >> 32, 0);
/// ```
#[inline(always)]
pub const fn count_share(index: usize, count: u64) -> u64 {
    let mut z = count.wrapping_add((index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `counts` packet of counts whose [`count_share`]s sum (wrapping) to `sum`: folded to
/// its low 32 bits, which leaves the high 32 to the buffers' identity.
#[inline(always)]
pub const fn counts_packet(sum: u64) -> u64 {
    (sum ^ (sum >> 32)) as u32 as u64
}

/// The `plan` packet: the knobs that change chunking and regimes (not `threads`, which only
/// informs), and the workspace layout.
#[inline(always)]
pub fn plan_word(plan: &Plan, ctx: &Context) -> u64 {
    let knobs = hash(&[
        plan.put_blocks as u64,
        plan.chunk_bytes,
        plan.latency_threshold,
        plan.two_shot_min_bytes,
        plan.two_shot_min_world as u64,
    ]);
    let layout = hash(&[
        ctx.staging_half_bytes,
        ctx.latency_window_bytes,
        ctx.world as u64,
    ]);
    knobs as u64 | ((layout as u64) << 32)
}

/// The first field in which two digests differ, with this rank's and the peer's value; the
/// `counts` packets are compared as they are (see [`PER_PAIR`] for per-pair counts).
#[inline(always)]
pub const fn compare(mine: &Digest, theirs: &Digest) -> Option<(DigestField, u64, u64)> {
    let fields = [
        (DigestField::Collective, 0, 0xff),
        (DigestField::Element, 8, 0xff),
        (DigestField::Operator, 16, 0xff),
        (DigestField::Mode, 24, 0xff),
        (DigestField::Algorithm, 32, 0xff),
        (DigestField::Blocks, 48, 0xffff),
    ];
    let mut i = 0;
    while i < fields.len() {
        let (field, shift, mask) = fields[i];
        let (a, b) = ((mine[0] >> shift) & mask, (theirs[0] >> shift) & mask);
        if a != b {
            return Some((field, a, b));
        }
        i += 1;
    }
    if (mine[0] ^ theirs[0]) & EXCHANGES_ADDRESSES != 0 {
        let bit = EXCHANGES_ADDRESSES.trailing_zeros();
        let (a, b) = ((mine[0] >> bit) & 1, (theirs[0] >> bit) & 1);
        return Some((DigestField::Buffers, a, b));
    }
    if mine[1] != theirs[1] {
        return Some((DigestField::Size, mine[1], theirs[1]));
    }
    if mine[2] != theirs[2] {
        return halves(
            mine[2],
            theirs[2],
            DigestField::Plan,
            DigestField::Workspace,
        );
    }
    if mine[3] != theirs[3] {
        // A per-pair packet is the count one rank sends the other. Any other holds the counts'
        // hash in the low 32 bits and the symmetric buffers in the high.
        if mine[0] & PER_PAIR_COUNTS != 0 {
            return Some((DigestField::Counts, mine[3], theirs[3]));
        }
        return halves(
            mine[3],
            theirs[3],
            DigestField::Counts,
            DigestField::Buffers,
        );
    }
    None
}

/// The first half of a packet in which this rank's and the peer's differ, `low` (the low 32 bits)
/// or `high`, with both values of that half.
#[inline(always)]
const fn halves(
    mine: u64,
    theirs: u64,
    low: DigestField,
    high: DigestField,
) -> Option<(DigestField, u64, u64)> {
    if mine as u32 != theirs as u32 {
        return Some((low, mine as u32 as u64, theirs as u32 as u64));
    }
    if mine >> 32 != theirs >> 32 {
        return Some((high, mine >> 32, theirs >> 32));
    }
    None
}
