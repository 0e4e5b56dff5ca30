//! Layouts: how a collective's buffer is cut into parts, one per peer. They know nothing of
//! GPUs or protocols; a collective is a pair of layouts (its input's and its output's) plus
//! copy or reduce, and SNAC turns the parts into streams.
//!
//! | layout | part exchanged with peer `q`, in a rank's buffer |
//! | --- | --- |
//! | [`Packed`] | the whole buffer (the same for every peer) |
//! | [`Scattered`] | slot `q`: `q × bytes .. (q + 1) × bytes` |
//! | [`Transposed`] | slot `q`, filled by (or taken from) rank `q` |
//! | [`PackedV`], [`ScatteredV`], [`TransposedV`] | the same with per-part element counts (and starts) read from memory |
//!
//! AllGather = packed → scattered, ReduceScatter = scattered → packed (reduce),
//! AllToAll = scattered → transposed, AllReduce = packed → packed (reduce), run as
//! ReduceScatter over [`Split`] parts then AllGather.
//!
//! ```
//! use purlin_device::layout::{Layout, Packed, Scattered, ScatteredV, Split};
//! assert_eq!(Packed { bytes: 12 }.part(1, 3), (0, 12));
//! assert_eq!(Scattered { bytes: 12 }.part(1, 3), (36, 12));
//! let (counts, starts) = ([2u64, 0, 5], [0u64, 2, 2]);
//! let v = ScatteredV { counts: counts.as_ptr(), starts: starts.as_ptr(), elem_bytes: 4 };
//! assert_eq!(v.part(0, 2), (8, 20));
//! assert_eq!(v.max_part(3), Some(20));
//! assert_eq!(v.longest_part(0, 3), 20);
//! // AllReduce shards: whole 16-byte units, the last one takes the tail.
//! assert_eq!(Split { bytes: 40, world: 2 }.part(0, 0), (0, 16));
//! assert_eq!(Split { bytes: 40, world: 2 }.part(0, 1), (16, 24));
//! ```

/// How a buffer of one rank is cut into parts.
pub trait Layout: Copy {
    /// Byte range `(offset, len)` of the part of `rank`'s buffer exchanged with `peer`.
    fn part(&self, rank: u32, peer: u32) -> (u64, u64);
    /// The largest part of any rank, if every rank can compute it from what it holds.
    fn max_part(&self, world: u32) -> Option<u64>;
    /// The largest of `rank`'s parts (with each of `world` peers).
    #[inline(always)]
    fn longest_part(&self, rank: u32, world: u32) -> u64 {
        match self.max_part(world) {
            Some(most) => most,
            None => (0..world).map(|p| self.part(rank, p).1).max().unwrap_or(0),
        }
    }
}

/// One part, the whole buffer of `bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed {
    /// Bytes of the buffer.
    pub bytes: u64,
}

impl Layout for Packed {
    #[inline(always)]
    fn part(&self, _: u32, _: u32) -> (u64, u64) {
        (0, self.bytes)
    }
    #[inline(always)]
    fn max_part(&self, _: u32) -> Option<u64> {
        Some(self.bytes)
    }
}

/// Defines layouts of `world` parts of `bytes` bytes, part `q` at bytes
/// `q × bytes .. (q + 1) × bytes`.
macro_rules! slots {
    ($($(#[$doc:meta])* $name:ident;)+) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            /// Bytes of one part.
            pub bytes: u64,
        }

        impl Layout for $name {
            #[inline(always)]
            fn part(&self, _: u32, peer: u32) -> (u64, u64) {
                (peer as u64 * self.bytes, self.bytes)
            }
            #[inline(always)]
            fn max_part(&self, _: u32) -> Option<u64> {
                Some(self.bytes)
            }
        }
    )+};
}

slots! {
    /// `world` parts of `bytes` bytes; part `q` goes to (or belongs to) rank `q`.
    Scattered;
    /// `world` parts of `bytes` bytes; part `p` comes from rank `p`.
    Transposed;
}

/// Reads `counts[i]` (device or host memory).
///
/// # Safety
/// `counts` is valid for `i + 1` values, which nothing writes while the collective runs.
#[inline(always)]
unsafe fn count(counts: *const u64, i: u32) -> u64 {
    // SAFETY: the caller guarantees it. A plain load, which the compiler may reuse: the
    // collectives pass the copy they validated into the block's shared memory, written before
    // a barrier and unchanged until the call ends (the caller's counts, which a graph replay
    // may rewrite, are read once, volatile, by that copy).
    unsafe { counts.add(i as usize).read() }
}

/// Offset and length in bytes of part `q` of parts sized `counts[..]` elements of `elem_bytes`
/// that start at `starts[..]` elements.
///
/// # Safety
/// `counts` and `starts` are valid for `q + 1` values.
#[inline(always)]
unsafe fn part_at(counts: *const u64, starts: *const u64, elem_bytes: u32, q: u32) -> (u64, u64) {
    let elem = elem_bytes as u64;
    // SAFETY: forwarded contract.
    unsafe { (count(starts, q) * elem, count(counts, q) * elem) }
}

/// The whole buffer, `counts[rank]` elements of `elem_bytes` (AllGatherV input).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedV {
    /// One count per rank (valid and unchanged for `world` values while the collective runs).
    pub counts: *const u64,
    /// Bytes per element.
    pub elem_bytes: u32,
}

impl Layout for PackedV {
    #[inline(always)]
    fn part(&self, rank: u32, _: u32) -> (u64, u64) {
        // SAFETY: the type's contract.
        (
            0,
            unsafe { count(self.counts, rank) } * self.elem_bytes as u64,
        )
    }
    #[inline(always)]
    fn max_part(&self, world: u32) -> Option<u64> {
        Some(max_count(self.counts, world) * self.elem_bytes as u64)
    }
}

/// Defines a layout of parts of `counts[q]` elements of `elem_bytes`, part `q` starting at element
/// `starts[q]`, with the given `max_part` (written as `|self, world| value`).
macro_rules! counted_parts {
    (
        $(#[$doc:meta])*
        $name:ident {
            $(#[$counts_doc:meta])*
            counts,
            $(#[$starts_doc:meta])*
            starts,
        },
        |$self:ident, $world:tt| $max_part:expr
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            $(#[$counts_doc])*
            pub counts: *const u64,
            $(#[$starts_doc])*
            pub starts: *const u64,
            /// Bytes per element.
            pub elem_bytes: u32,
        }

        impl Layout for $name {
            #[inline(always)]
            fn part(&self, _: u32, peer: u32) -> (u64, u64) {
                // SAFETY: the type's contract.
                unsafe { part_at(self.counts, self.starts, self.elem_bytes, peer) }
            }
            #[inline(always)]
            fn max_part(&$self, $world: u32) -> Option<u64> {
                $max_part
            }
        }
    };
}

counted_parts!(
    /// Parts of `counts[q]` elements, one after the other in rank order (AllGatherV output,
    /// ReduceScatterV and AllToAllV input): part `q` starts at element `starts[q]`, the sum of the
    /// counts before it (the collectives compute them once per call, with the counts' check).
    ScatteredV {
        /// One count per part (valid and unchanged for `world` values while the collective runs).
        counts,
        /// Where each part starts, in elements: `starts[q] = counts[0] + … + counts[q - 1]`
        /// (valid and unchanged for `world` values while the collective runs).
        starts,
    },
    |self, world| Some(max_count(self.counts, world) * self.elem_bytes as u64)
);

counted_parts!(
    /// Parts of `counts[p]` elements received from rank `p`, in rank order (AllToAllV output),
    /// part `p` starting at element `starts[p]` (as [`ScatteredV`]). Only this rank's counts are
    /// known here, so the largest part of other ranks is not.
    TransposedV {
        /// One count per source rank (valid and unchanged for `world` values while the
        /// collective runs).
        counts,
        /// Where each part starts, in elements (valid for `world` values while the collective
        /// runs).
        starts,
    },
    |self, _| None
);

/// The largest of `counts[0..world]`.
#[inline(never)]
fn max_count(counts: *const u64, world: u32) -> u64 {
    let mut m = 0;
    for i in 0..world {
        // SAFETY: the layouts' contract.
        m = m.max(unsafe { count(counts, i) });
    }
    m
}

/// `world` nearly equal parts of a `bytes`-byte buffer in whole 16-byte units (the last one
/// also takes the tail): the shards AllReduce reduces and gathers. Every part starts 16-byte
/// aligned, so shards move through the Atoms whatever the element count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Split {
    /// Bytes of the buffer.
    pub bytes: u64,
    /// Parts (ranks).
    pub world: u32,
}

impl Layout for Split {
    #[inline(always)]
    fn part(&self, _: u32, peer: u32) -> (u64, u64) {
        let (offset, len) = crate::partition::split_bytes(
            self.bytes as usize,
            16,
            self.world as usize,
            peer as usize,
        );
        (offset as u64, len as u64)
    }
    #[inline(always)]
    fn max_part(&self, _: u32) -> Option<u64> {
        // The first part is never shorter than the others but the last, which adds < 16 bytes.
        let (_, first) = self.part(0, 0);
        let (_, last) = self.part(0, self.world - 1);
        Some(if first > last { first } else { last })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec::Vec;

    proptest! {
        #[test]
        fn v_parts_tile_the_buffer(counts in proptest::collection::vec(0u64..1000, 1..=16), elem in 1u32..=4) {
            let world = counts.len() as u32;
            let starts: Vec<u64> = counts
                .iter()
                .scan(0, |sum, &c| { let at = *sum; *sum += c; Some(at) })
                .collect();
            let l = ScatteredV { counts: counts.as_ptr(), starts: starts.as_ptr(), elem_bytes: elem };
            let mut next = 0;
            for q in 0..world {
                let (offset, len) = l.part(0, q);
                prop_assert_eq!(offset, next);
                prop_assert_eq!(len, counts[q as usize] * elem as u64);
                next += len;
            }
            prop_assert_eq!(l.max_part(world), Some(*counts.iter().max().unwrap() * elem as u64));
        }

        #[test]
        fn split_parts_are_aligned_and_tile(bytes in 0u64..1 << 24, world in 1u32..=16) {
            let l = Split { bytes, world };
            let mut next = 0;
            let mut lens = Vec::new();
            for q in 0..world {
                let (offset, len) = l.part(0, q);
                prop_assert_eq!(offset, next);
                prop_assert_eq!(offset % 16, 0);
                next += len;
                lens.push(len);
            }
            prop_assert_eq!(next, bytes);
            prop_assert_eq!(l.max_part(world), lens.iter().copied().max());
        }
    }
}
