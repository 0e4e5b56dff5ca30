//! Collectives as streams: each pattern turns a pair of layouts into the producer and consumer
//! streams SNAC runs, and into one rank's moves of a pass over symmetric buffers.

use crate::layout::{Layout, Split};
use crate::snac::SignalKind;
use crate::snac::staging::{Get, Put, Streams};
use crate::snac::symmetric::{EvenSlice, Move, OnePass, Output, Reach, ranks_from};
use crate::snac::sync::Ranks;

/// Where a rank's buffers are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buffers {
    pub(crate) me: u32,
    pub(crate) world: u32,
    pub(crate) src: *const u8,
    pub(crate) dst: *mut u8,
}

impl Buffers {
    /// This rank's buffers of a call.
    #[inline(always)]
    pub(crate) const fn of(args: &crate::snac::SnacArgs, ctx: &crate::context::Context) -> Self {
        Self {
            me: ctx.rank,
            world: ctx.world,
            src: args.src,
            dst: args.dst,
        }
    }

    #[inline(always)]
    fn src_at(&self, offset: u64) -> *const u8 {
        self.src.wrapping_add(offset as usize)
    }
    #[inline(always)]
    fn dst_at(&self, offset: u64) -> *mut u8 {
        self.dst.wrapping_add(offset as usize)
    }
}

/// AllGather(V): `src` (packed: one part) goes to every rank; part `p` of `dst` (scattered)
/// comes from rank `p`. One region; every rank reads it, so a reused slot waits for all.
pub(crate) struct Gather<S, D> {
    pub(crate) b: Buffers,
    pub(crate) src: S,
    pub(crate) dst: D,
}

impl<S: Layout, D: Layout> Streams for Gather<S, D> {
    fn regions(&self) -> u32 {
        1
    }
    fn puts(&self) -> u32 {
        1
    }
    #[inline(always)]
    fn put(&self, _: u32) -> Put {
        let (offset, len) = self.src.part(self.b.me, self.b.me);
        Put {
            src: self.b.src_at(offset),
            len,
            region: 0,
            notify: Ranks::Others,
            drain_kind: SignalKind::Consumed,
            drain: Ranks::Others,
        }
    }
    fn gets(&self) -> u32 {
        self.b.world
    }
    #[inline(always)]
    fn get(&self, j: u32) -> Get {
        let me = self.b.me;
        let q = (me + j) % self.b.world;
        if q == me {
            // The own part goes straight from src to dst (nothing when in place).
            let (so, len) = self.src.part(me, me);
            let (doff, _) = self.dst.part(me, me);
            let (src, dst) = (self.b.src_at(so), self.b.dst_at(doff));
            let len = if core::ptr::eq(src, dst) { 0 } else { len };
            Get::Local { src, dst, len }
        } else {
            let (offset, len) = self.dst.part(me, q);
            Get::Copy {
                peer: q,
                region: 0,
                dst: self.b.dst_at(offset),
                len,
                wait: SignalKind::Data,
            }
        }
    }
    fn agreed_len(&self) -> Option<u64> {
        self.dst.max_part(self.b.world)
    }
}

/// AllToAll(V): part `q` of `src` (scattered) goes to rank `q`; part `p` of `dst`
/// (transposed) comes from rank `p`. One region per destination; only it reads the region.
pub(crate) struct Exchange<S, D> {
    pub(crate) b: Buffers,
    pub(crate) src: S,
    pub(crate) dst: D,
}

impl<S: Layout, D: Layout> Streams for Exchange<S, D> {
    fn regions(&self) -> u32 {
        self.b.world
    }
    fn puts(&self) -> u32 {
        self.b.world - 1
    }
    #[inline(always)]
    fn put(&self, j: u32) -> Put {
        // Rotated so that the ranks start on different peers.
        let q = (self.b.me + 1 + j) % self.b.world;
        let (offset, len) = self.src.part(self.b.me, q);
        Put {
            src: self.b.src_at(offset),
            len,
            region: q,
            notify: Ranks::One(q),
            drain_kind: SignalKind::Consumed,
            drain: Ranks::One(q),
        }
    }
    fn gets(&self) -> u32 {
        self.b.world
    }
    #[inline(always)]
    fn get(&self, j: u32) -> Get {
        let me = self.b.me;
        let p = (me + j) % self.b.world;
        if p == me {
            let (so, len) = self.src.part(me, me);
            let (doff, _) = self.dst.part(me, me);
            Get::Local {
                src: self.b.src_at(so),
                dst: self.b.dst_at(doff),
                len,
            }
        } else {
            let (offset, len) = self.dst.part(me, p);
            Get::Copy {
                peer: p,
                region: me,
                dst: self.b.dst_at(offset),
                len,
                wait: SignalKind::Data,
            }
        }
    }
    fn agreed_len(&self) -> Option<u64> {
        // The output layout decides: a V output only knows this rank's counts.
        let d = self.dst.max_part(self.b.world)?;
        let s = self.src.max_part(self.b.world)?;
        Some(d.max(s))
    }
}

/// ReduceScatter(V): part `q` of `src` (scattered) is reduced over all ranks into rank `q`'s
/// `dst` (packed). One region per shard; the owner of the shard reads it.
pub(crate) struct Scatter<S> {
    pub(crate) b: Buffers,
    pub(crate) src: S,
}

impl<S: Layout> Streams for Scatter<S> {
    fn regions(&self) -> u32 {
        self.b.world
    }
    fn puts(&self) -> u32 {
        self.b.world
    }
    #[inline(always)]
    fn put(&self, j: u32) -> Put {
        let q = (self.b.me + 1 + j) % self.b.world;
        let (offset, len) = self.src.part(self.b.me, q);
        Put {
            src: self.b.src_at(offset),
            len,
            region: q,
            notify: Ranks::One(q),
            drain_kind: SignalKind::Consumed,
            drain: Ranks::One(q),
        }
    }
    fn gets(&self) -> u32 {
        1
    }
    #[inline(always)]
    fn get(&self, _: u32) -> Get {
        let (_, len) = self.src.part(self.b.me, self.b.me);
        Get::Reduce {
            region: self.b.me,
            len,
            dst: self.b.dst,
            post: SignalKind::Consumed,
        }
    }
    fn agreed_len(&self) -> Option<u64> {
        self.src.max_part(self.b.world)
    }
}

/// AllReduce, world > 2: a ReduceScatter head over [`Split`] shards, reducing each shard in
/// place in its owner's staging and announcing it with *gather*, composed with an AllGather
/// tail that pulls every reduced shard into `dst`. A slot of another rank's shard is free once
/// that rank reduced it (gather); a slot of this rank's own shard once every tail copied it.
pub(crate) struct Composed {
    pub(crate) b: Buffers,
    pub(crate) shards: Split,
}

impl Streams for Composed {
    fn regions(&self) -> u32 {
        self.b.world
    }
    fn puts(&self) -> u32 {
        self.b.world
    }
    #[inline(always)]
    fn put(&self, j: u32) -> Put {
        let me = self.b.me;
        let q = (me + 1 + j) % self.b.world;
        let (offset, len) = self.shards.part(me, q);
        let (drain_kind, drain) = if q == me {
            (SignalKind::Consumed, Ranks::All)
        } else {
            (SignalKind::Gather, Ranks::One(q))
        };
        Put {
            src: self.b.src_at(offset),
            len,
            region: q,
            notify: Ranks::One(q),
            drain_kind,
            drain,
        }
    }
    fn gets(&self) -> u32 {
        self.b.world + 1
    }
    #[inline(always)]
    fn get(&self, j: u32) -> Get {
        let me = self.b.me;
        if j == 0 {
            let (_, len) = self.shards.part(me, me);
            return Get::Reduce {
                region: me,
                len,
                dst: core::ptr::null_mut(),
                post: SignalKind::Gather,
            };
        }
        let q = (me + j - 1) % self.b.world;
        let (offset, len) = self.shards.part(me, q);
        Get::Copy {
            peer: q,
            region: q,
            dst: self.b.dst_at(offset),
            len,
            wait: SignalKind::Gather,
        }
    }
    fn agreed_len(&self) -> Option<u64> {
        self.shards.max_part(self.b.world)
    }
}

/// AllReduce, direct (world 2): every rank stages its whole input, and every rank reduces the
/// whole buffer from all stagings.
pub(crate) struct Direct {
    pub(crate) b: Buffers,
    pub(crate) bytes: u64,
}

impl Streams for Direct {
    fn regions(&self) -> u32 {
        1
    }
    fn puts(&self) -> u32 {
        1
    }
    #[inline(always)]
    fn put(&self, _: u32) -> Put {
        Put {
            src: self.b.src,
            len: self.bytes,
            region: 0,
            notify: Ranks::All,
            drain_kind: SignalKind::Consumed,
            drain: Ranks::All,
        }
    }
    fn gets(&self) -> u32 {
        1
    }
    #[inline(always)]
    fn get(&self, _: u32) -> Get {
        Get::Reduce {
            region: 0,
            len: self.bytes,
            dst: self.b.dst,
            post: SignalKind::Consumed,
        }
    }
    fn agreed_len(&self) -> Option<u64> {
        Some(self.bytes)
    }
}

/// Over symmetric buffers: when every rank's input and output are symmetric, the ranks share
/// the output out evenly and each copies its slice from the parts' owners into every output
/// (each input byte read once, and the work even whatever the counts); when only the outputs
/// are, push this rank's `src` into its part of every rank's `dst`; else pull part `q` of
/// `dst` from rank `q`'s `src`. Either way starting at this rank's own part (nothing moves for
/// it in place).
impl<S: Layout, D: Layout> OnePass for Gather<S, D> {
    #[inline(always)]
    fn moves(&self, reach: Reach, mut each: impl FnMut(Move)) {
        let (me, world) = (self.b.me, self.b.world);
        match (reach.reads, reach.writes) {
            (true, true) => {
                let (last_at, last_len) = self.dst.part(me, world - 1);
                let slice = EvenSlice::of(me, world, last_at + last_len);
                for q in ranks_from(me, world) {
                    let part = self.dst.part(me, q);
                    if let Some((dst_at, len)) = slice.cut(part) {
                        let (src_at, _) = self.src.part(q, q);
                        each(Move::Spread {
                            peer: q,
                            src_at: src_at + (dst_at - part.0),
                            dst_at,
                            len,
                        });
                    }
                }
            }
            (false, true) => {
                let (src_at, len) = self.src.part(me, me);
                let (dst_at, _) = self.dst.part(me, me);
                each(Move::Push {
                    src_at,
                    dst_at,
                    len,
                });
            }
            _ => {
                for q in ranks_from(me, world) {
                    let (src_at, len) = self.src.part(q, q);
                    let (dst_at, _) = self.dst.part(me, q);
                    each(Move::Pull {
                        peer: q,
                        src_at,
                        dst_at,
                        len,
                    });
                }
            }
        }
    }
}

/// Over symmetric buffers: pull the part of rank `p`'s `src` meant for this rank into part `p`
/// of `dst`, as long as this rank receives from `p` (`p` sends as much: the digest compares
/// it). Where it lies in `p`'s `src` follows from `p`'s layout, or `p` announced it
/// (AllToAllV, whose counts are each rank's own).
impl<S: Layout, D: Layout> OnePass for Exchange<S, D> {
    #[inline(always)]
    fn moves(&self, reach: Reach, mut each: impl FnMut(Move)) {
        let me = self.b.me;
        for p in ranks_from(me, self.b.world) {
            let src_at = if reach.announced {
                0
            } else {
                self.src.part(p, me).0
            };
            let (dst_at, len) = self.dst.part(me, p);
            each(Move::Pull {
                peer: p,
                src_at,
                dst_at,
                len,
            });
        }
    }
    #[inline(always)]
    fn announced(&self, peer: u32) -> u64 {
        self.src.part(self.b.me, peer).0
    }
}

/// Over symmetric buffers: reduce this rank's part of every rank's `src` into `dst`; when every
/// rank's output is symmetric too, the ranks share the parts out evenly instead, each reducing
/// its slice into the outputs of the parts' owners (the work even whatever the counts).
impl<S: Layout> OnePass for Scatter<S> {
    #[inline(always)]
    fn moves(&self, reach: Reach, mut each: impl FnMut(Move)) {
        let (me, world) = (self.b.me, self.b.world);
        if reach.writes {
            let (last_at, last_len) = self.src.part(me, world - 1);
            let slice = EvenSlice::of(me, world, last_at + last_len);
            for q in ranks_from(me, world) {
                let part = self.src.part(me, q);
                if let Some((src_at, len)) = slice.cut(part) {
                    each(Move::Reduce {
                        src_at,
                        dst_at: src_at - part.0,
                        len,
                        into: Output::Rank(q),
                    });
                }
            }
            return;
        }
        let (src_at, len) = self.src.part(me, me);
        each(Move::Reduce {
            src_at,
            dst_at: 0,
            len,
            into: Output::Own,
        });
    }
}

/// AllReduce over symmetric buffers: this rank reduces its shard of every rank's `src` into
/// the same shard of every rank's `dst`.
fn own_shard(me: u32, shards: Split) -> Move {
    let (at, len) = shards.part(me, me);
    Move::Reduce {
        src_at: at,
        dst_at: at,
        len,
        into: Output::Every,
    }
}

impl OnePass for Composed {
    #[inline(always)]
    fn moves(&self, _: Reach, mut each: impl FnMut(Move)) {
        each(own_shard(self.b.me, self.shards));
    }
}

impl OnePass for Direct {
    #[inline(always)]
    fn moves(&self, _: Reach, mut each: impl FnMut(Move)) {
        let shards = Split {
            bytes: self.bytes,
            world: self.b.world,
        };
        each(own_shard(self.b.me, shards));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{PackedV, ScatteredV};
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    fn buffers(me: u32, world: u32) -> Buffers {
        Buffers {
            me,
            world,
            src: core::ptr::null(),
            dst: core::ptr::null_mut(),
        }
    }

    proptest! {
        /// Over symmetric inputs and outputs, the V forms' even shares: every rank's moves are
        /// non-empty, stay inside their part, and together cover every output byte once.
        #[test]
        fn even_shares_tile_the_output_without_empty_moves(
            counts in prop::collection::vec(0u64..300, 1..=16),
            elem in prop::sample::select(vec![1u32, 2, 4, 8]),
        ) {
            let world = counts.len() as u32;
            let mut starts = Vec::with_capacity(counts.len());
            let mut sum = 0;
            for c in &counts {
                starts.push(sum);
                sum += c;
            }
            let total = sum * elem as u64;
            let scattered = ScatteredV {
                counts: counts.as_ptr(),
                starts: starts.as_ptr(),
                elem_bytes: elem,
            };
            let packed = PackedV { counts: counts.as_ptr(), elem_bytes: elem };
            let both = Reach { reads: true, writes: true, announced: false };
            let mut gathered = vec![0u32; total as usize];
            let mut reduced = vec![0u32; total as usize];
            for me in 0..world {
                let gather = Gather { b: buffers(me, world), src: packed, dst: scattered };
                gather.moves(both, |m| {
                    let Move::Spread { peer, src_at, dst_at, len } = m else {
                        panic!("not a spread: {m:?}");
                    };
                    assert!(len > 0);
                    let (part_at, part_len) = scattered.part(me, peer);
                    assert!(dst_at >= part_at && dst_at + len <= part_at + part_len);
                    assert_eq!(src_at, dst_at - part_at);
                    for b in dst_at..dst_at + len {
                        gathered[b as usize] += 1;
                    }
                });
                let scatter = Scatter { b: buffers(me, world), src: scattered };
                scatter.moves(both, |m| {
                    let Move::Reduce { src_at, dst_at, len, into: Output::Rank(q) } = m else {
                        panic!("not a reduction into a part's owner: {m:?}");
                    };
                    assert!(len > 0);
                    let (part_at, part_len) = scattered.part(me, q);
                    assert!(src_at >= part_at && src_at + len <= part_at + part_len);
                    assert_eq!(dst_at, src_at - part_at);
                    for b in src_at..src_at + len {
                        reduced[b as usize] += 1;
                    }
                });
            }
            prop_assert!(gathered.iter().all(|&n| n == 1));
            prop_assert!(reduced.iter().all(|&n| n == 1));
        }
    }
}
