//! Which block does what: the split of a launch into producer and consumer sets, and of a set
//! over its streams, in proportion to their weights (bytes to move), so skewed V sizes get
//! blocks where the bytes are.
//!
//! ```
//! use purlin_device::snac::assign::{roles, share, Share};
//! let r = roles(8, 3);
//! assert_eq!((r.producers, r.consumers), ((0, 3), (3, 5)));
//! // 6 consumer blocks over 2 streams weighing 1 and 3: one each, the 4 others split 1:3.
//! assert_eq!(share(6, 5, 2, |j| [1u64, 3][j as usize]), Share::One { stream: 1, set: 4, index: 3 });
//! // 2 blocks over 5 streams: block 1 takes streams 1 and 3, each alone.
//! assert_eq!(share(2, 1, 5, |_| 1), Share::Strided { first: 1, step: 2 });
//! ```

/// A contiguous range of blocks: `(first, count)`.
pub type Range = (u32, u32);

/// The producer and consumer sets of a throughput call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Roles {
    /// Blocks that stage and notify.
    pub producers: Range,
    /// Blocks that wait and consume.
    pub consumers: Range,
}

impl Roles {
    /// Whether `block` produces.
    #[inline(always)]
    pub const fn produces(&self, block: u32) -> bool {
        block >= self.producers.0 && block < self.producers.0 + self.producers.1
    }

    /// Whether `block` consumes.
    #[inline(always)]
    pub const fn consumes(&self, block: u32) -> bool {
        block >= self.consumers.0 && block < self.consumers.0 + self.consumers.1
    }
}

/// Splits `blocks` into producers (`put_blocks`, clamped so both sets are non-empty) and
/// consumers. A single block does both, producing before consuming in every round, which is
/// deadlock-free (see `staging`).
#[inline(always)]
pub const fn roles(blocks: u32, put_blocks: u32) -> Roles {
    if blocks <= 1 {
        return Roles {
            producers: (0, 1),
            consumers: (0, 1),
        };
    }
    let p = if put_blocks < 1 {
        1
    } else if put_blocks > blocks - 1 {
        blocks - 1
    } else {
        put_blocks
    };
    Roles {
        producers: (0, p),
        consumers: (p, blocks - p),
    }
}

/// The streams one block of a set works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// One stream, shared with `set - 1` other blocks; this block is `index` of them.
    One {
        /// The stream.
        stream: u32,
        /// Blocks working on it.
        set: u32,
        /// This block's place among them.
        index: u32,
    },
    /// Streams `first, first + step, ...`, each alone (fewer blocks than streams).
    Strided {
        /// The first stream.
        first: u32,
        /// The distance between this block's streams.
        step: u32,
    },
    /// Nothing (no streams).
    Nothing,
}

/// Share of block `k` of a set of `set_blocks` over `streams` streams weighing `weight(j)`
/// (at least 1 each). With at least as many blocks as streams, each stream gets one block plus
/// a part of the rest in proportion to its weight (leftovers to the first streams), as
/// contiguous ranges in stream order; with fewer, streams are dealt round-robin.
#[inline(always)]
pub fn share<W: Fn(u32) -> u64>(set_blocks: u32, k: u32, streams: u32, weight: W) -> Share {
    if streams == 0 || set_blocks == 0 {
        return Share::Nothing;
    }
    if set_blocks < streams {
        return Share::Strided {
            first: k,
            step: set_blocks,
        };
    }
    let extra = (set_blocks - streams) as u64;
    let mut total = 0u64;
    for j in 0..streams {
        total += weight(j).max(1);
    }
    let mut given = 0u64;
    for j in 0..streams {
        given += extra * weight(j).max(1) / total;
    }
    let leftover = extra - given;
    let mut start = 0u32;
    for j in 0..streams {
        let count =
            1 + (extra * weight(j).max(1) / total) as u32 + u32::from((j as u64) < leftover);
        if k < start + count {
            return Share::One {
                stream: j,
                set: count,
                index: k - start,
            };
        }
        start += count;
    }
    // Unreachable: the counts add up to `set_blocks` and `k < set_blocks`.
    Share::Nothing
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    proptest! {
        #[test]
        fn roles_are_disjoint_and_cover(blocks in 2u32..=64, put in 0u32..80) {
            let r = roles(blocks, put);
            prop_assert!(r.producers.1 >= 1 && r.consumers.1 >= 1);
            prop_assert_eq!(r.producers.1 + r.consumers.1, blocks);
            for b in 0..blocks {
                prop_assert!(r.produces(b) != r.consumes(b));
            }
        }

        #[test]
        fn every_stream_gets_blocks(set in 1u32..=64, weights in proptest::collection::vec(0u64..1 << 40, 1..=17)) {
            let m = weights.len() as u32;
            let mut per_stream = vec![Vec::new(); m as usize];
            for k in 0..set {
                match share(set, k, m, |j| weights[j as usize]) {
                    Share::One { stream, set: size, index } => {
                        prop_assert!(index < size);
                        per_stream[stream as usize].push((k, size, index));
                    }
                    Share::Strided { first, step } => {
                        prop_assert!(set < m);
                        let mut j = first;
                        while j < m {
                            per_stream[j as usize].push((k, 1, 0));
                            j += step;
                        }
                    }
                    Share::Nothing => prop_assert!(false, "block {} got nothing", k),
                }
            }
            for blocks in &per_stream {
                prop_assert!(!blocks.is_empty());
                let size = blocks[0].1;
                prop_assert_eq!(blocks.len() as u32, size);
                for (i, b) in blocks.iter().enumerate() {
                    prop_assert_eq!(b.1, size);
                    prop_assert_eq!(b.2, i as u32);
                }
            }
        }
    }
}
