//! The throughput regime: chunked stage / notify / consume over resident or cyclic staging.
//!
//! A collective describes itself as *streams* ([`Streams`]): producer streams ([`Put`]) stage a
//! part of `src` into one *region* of this rank's staging half and notify its readers; consumer
//! streams ([`Get`]) pull a peer's region into `dst`, copy locally, or reduce one region of
//! every rank. Each region holds `slots` chunks; a stream with more chunks than slots cycles,
//! and before reusing a slot its producer waits until the slot's readers posted *consumed*
//! (or, for the AllReduce head, *gather*) for the previous occupant.
//!
//! Blocks are split into producers and consumers ([`roles`]), each set over its streams in
//! proportion to bytes ([`share`]). Every block works round by round: in round `i` it stages
//! chunk `i` of its producer streams, then consumes chunk `i` of its consumer streams
//! (reductions before copies). That order makes any split deadlock-free, even a single block
//! doing everything: round `i`'s production waits only for consumption of round
//! `i - slots`, and round `i`'s consumption only for production (and reduction) of round `i`.

use super::assign::{Share, roles, share};
use super::epoch;
use super::fault::SignalKind;
use super::sync::{Call, Counter, Left, Ranks};
use super::transfer;
use super::transfer::Reducer;
use super::{Plan, SnacArgs};
use crate::atom::{Atom, MAX_SOURCES};
use crate::coop::Coop;
use crate::partition::split_bytes;

/// A producer stream: stage `len` bytes of `src` into region `region` of this rank's staging,
/// chunk by chunk, notifying `notify` with [`SignalKind::Data`]; before reusing a slot, wait
/// for `drain_kind` from every rank in `drain`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Put {
    pub(crate) src: *const u8,
    pub(crate) len: u64,
    pub(crate) region: u32,
    pub(crate) notify: Ranks,
    pub(crate) drain_kind: SignalKind,
    pub(crate) drain: Ranks,
}

/// A consumer stream.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Get {
    /// Copy `len` bytes of region `region` of `peer`'s staging to `dst` once `peer` posted
    /// `wait` for each chunk; post *consumed* back to `peer` when it will reuse the slot.
    Copy {
        peer: u32,
        region: u32,
        dst: *mut u8,
        len: u64,
        wait: SignalKind,
    },
    /// Copy `len` bytes from `src` to `dst` on this rank (no staging, no signals).
    Local {
        src: *const u8,
        dst: *mut u8,
        len: u64,
    },
    /// Reduce region `region` of every rank's staging (ranks in order) into `dst`, or in place
    /// into this rank's own region when `dst` is null (the AllReduce head); then post `post`
    /// (`Consumed` when the slot will be reused, `Gather` always) to every rank.
    Reduce {
        region: u32,
        len: u64,
        dst: *mut u8,
        post: SignalKind,
    },
}

impl Get {
    /// Bytes of the stream.
    #[inline(always)]
    pub(crate) const fn len(&self) -> u64 {
        match *self {
            Get::Copy { len, .. } | Get::Local { len, .. } | Get::Reduce { len, .. } => len,
        }
    }

    /// Work, for splitting blocks: a reduction reads every rank.
    #[inline(always)]
    const fn weight(&self, world: u32) -> u64 {
        match *self {
            Get::Reduce { len, .. } => len * world as u64,
            _ => self.len(),
        }
    }
}

/// The streams of one rank in one call.
pub(crate) trait Streams {
    /// Regions per staging half.
    fn regions(&self) -> u32;
    /// Producer streams.
    fn puts(&self) -> u32;
    /// Producer stream `j`.
    fn put(&self, j: u32) -> Put;
    /// Consumer streams (reductions first).
    fn gets(&self) -> u32;
    /// Consumer stream `j`.
    fn get(&self, j: u32) -> Get;
    /// The largest stream of the call on any rank, if every rank can compute it (else the
    /// ranks exchange their own largest).
    fn agreed_len(&self) -> Option<u64>;
}

/// The geometry of one call's staging.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    /// Chunk bytes (a multiple of 16).
    pub(crate) chunk: u64,
    /// Slots per region.
    pub(crate) slots: u64,
}

impl Geometry {
    /// The geometry for `regions` regions; `None` if staging cannot hold one 16-byte unit per
    /// region.
    #[inline(always)]
    pub(crate) const fn new(plan: &Plan, half_bytes: u64, regions: u32) -> Option<Self> {
        let chunk = epoch::chunk_size(plan.chunk_bytes, half_bytes, regions as u64);
        if chunk == 0 {
            return None;
        }
        Some(Self {
            chunk,
            slots: epoch::slots(half_bytes, regions as u64, chunk),
        })
    }

    /// Chunks of a stream of `len` bytes.
    #[inline(always)]
    pub(crate) const fn chunks(&self, len: u64) -> u64 {
        epoch::chunks(len, self.chunk)
    }

    /// Bytes of chunk `i` of a `len`-byte stream.
    #[inline(always)]
    const fn chunk_len(&self, len: u64, i: u64) -> u64 {
        let at = i * self.chunk;
        if at >= len {
            0
        } else if len - at < self.chunk {
            len - at
        } else {
            self.chunk
        }
    }
}

/// Runs `f(stream, set, index)` for every stream of a share.
#[inline(always)]
fn for_each<F: FnMut(u32, u32, u32) -> Result<(), Left>>(
    share: Share,
    streams: u32,
    mut f: F,
) -> Result<(), Left> {
    match share {
        Share::One { stream, set, index } => f(stream, set, index),
        Share::Strided { first, step } => {
            let mut j = first;
            while j < streams {
                f(j, 1, 0)?;
                j += step;
            }
            Ok(())
        }
        Share::Nothing => Ok(()),
    }
}

/// One block's part of a throughput call.
pub(crate) struct Engine<'a, S> {
    pub(crate) streams: &'a S,
    slots: Slots,
}

/// Where this call's chunks live, and the steps that move them: independent of the streams and
/// of the reduction, so each step is compiled once per Atom (and once per reduction for
/// [`Slots::reduce_chunk`]).
#[derive(Clone, Copy)]
struct Slots {
    geometry: Geometry,
    half_bytes: u64,
    smem: *mut u8,
}

impl<'a, S: Streams> Engine<'a, S> {
    /// An engine over `streams`; if staging cannot hold one 16-byte unit per region, the call
    /// is refused ([`Refusal::StagingTooSmall`](super::fault::Refusal::StagingTooSmall)
    /// recorded) and `Err`.
    pub(crate) fn new(
        call: &Call,
        streams: &'a S,
        plan: &Plan,
        smem: *mut u8,
    ) -> Result<Self, Left> {
        let half_bytes = call.ctx.staging_half_bytes;
        match Geometry::new(plan, half_bytes, streams.regions()) {
            Some(geometry) => Ok(Self {
                streams,
                slots: Slots {
                    geometry,
                    half_bytes,
                    smem,
                },
            }),
            None => Err(call.refuse(
                super::fault::Refusal::StagingTooSmall,
                0,
                half_bytes,
                streams.regions() as u64,
            )),
        }
    }

    /// The geometry of the call's staging.
    #[inline(always)]
    pub(crate) const fn geometry(&self) -> Geometry {
        self.slots.geometry
    }

    /// The largest chunk count of this rank's streams (for the size agreement).
    pub(crate) fn local_rounds(&self) -> u64 {
        let g = self.slots.geometry;
        let mut rounds = 1;
        for j in 0..self.streams.puts() {
            rounds = rounds.max(g.chunks(self.streams.put(j).len));
        }
        for j in 0..self.streams.gets() {
            rounds = rounds.max(g.chunks(self.streams.get(j).len()));
        }
        rounds
    }

    /// Runs this block's share of the call, reducing with `reducer`.
    ///
    /// # Safety
    /// The streams describe valid memory; every thread of the block calls.
    #[inline(always)]
    pub(crate) unsafe fn run<A: Atom, R: Reducer>(
        &self,
        call: &mut Call,
        args: &SnacArgs,
        plan: &Plan,
        reducer: R,
    ) -> Result<(), Left> {
        let roles = roles(args.blocks, plan.put_blocks);
        let world = call.world();
        let s = self.streams;
        let g = self.slots.geometry;
        let put_share = if roles.produces(call.block) {
            share(
                roles.producers.1,
                call.block - roles.producers.0,
                s.puts(),
                |j| s.put(j).len,
            )
        } else {
            Share::Nothing
        };
        let get_share = if roles.consumes(call.block) {
            share(
                roles.consumers.1,
                call.block - roles.consumers.0,
                s.gets(),
                |j| s.get(j).weight(world),
            )
        } else {
            Share::Nothing
        };
        let mut rounds = 0;
        let _ = for_each(put_share, s.puts(), |j, _, _| {
            rounds = rounds.max(g.chunks(s.put(j).len));
            Ok(())
        });
        let _ = for_each(get_share, s.gets(), |j, _, _| {
            rounds = rounds.max(g.chunks(s.get(j).len()));
            Ok(())
        });
        for i in 0..rounds {
            let part = |set, index| ChunkPart {
                chunk: i,
                set,
                index,
            };
            for_each(put_share, s.puts(), |j, set, index| {
                let put = s.put(j);
                if i < g.chunks(put.len) {
                    // SAFETY: forwarded contract.
                    unsafe { self.slots.put_chunk::<A>(&put, call, part(set, index)) }
                } else {
                    Ok(())
                }
            })?;
            for_each(get_share, s.gets(), |j, set, index| {
                let get = s.get(j);
                if i >= g.chunks(get.len()) {
                    return Ok(());
                }
                let part = part(set, index);
                // SAFETY (both arms): forwarded contract.
                match get {
                    Get::Reduce { .. } => unsafe {
                        self.slots.reduce_chunk::<A, R>(call, &get, part, reducer)
                    },
                    _ => unsafe { self.slots.copy_chunk::<A>(call, &get, part) },
                }
            })?;
        }
        Ok(())
    }
}

/// A block's part of one chunk of a stream: part `index` of the `set` blocks that share it.
#[derive(Clone, Copy, Debug)]
struct ChunkPart {
    chunk: u64,
    set: u32,
    index: u32,
}

impl Slots {
    /// Address of slot `slot` of `region` in `rank`'s staging, this call's half.
    #[inline(always)]
    fn slot_ptr(&self, call: &Call, rank: u32, region: u32, slot: u64) -> *mut u8 {
        let g = self.geometry;
        (call.ctx.staging[rank as usize]
            + call.half() * self.half_bytes
            + region as u64 * g.slots * g.chunk
            + slot * g.chunk) as *mut u8
    }

    /// The slot a chunk goes through and the flag that announces it, in this call.
    #[inline(always)]
    fn place(&self, call: &Call, part: ChunkPart) -> (u64, u64) {
        (
            epoch::slot(part.chunk, self.geometry.slots),
            epoch::flag(call.epoch, part.chunk),
        )
    }

    /// Whether consuming this chunk of a `total`-byte stream frees a slot its producer waits
    /// for (it then posts `Consumed`).
    #[inline(always)]
    fn posts_consumed(&self, part: ChunkPart, total: u64) -> bool {
        let g = self.geometry;
        epoch::must_post_consumed(part.chunk, g.chunks(total), g.slots)
    }

    /// This block's slice of a chunk of a `len`-byte stream: (offset in the chunk, offset in
    /// the stream, bytes).
    #[inline(always)]
    fn slice(&self, len: u64, part: ChunkPart) -> (usize, usize, usize) {
        let g = self.geometry;
        let (offset, n) = split_bytes(
            g.chunk_len(len, part.chunk) as usize,
            16,
            part.set as usize,
            part.index as usize,
        );
        (offset, (part.chunk * g.chunk) as usize + offset, n)
    }

    /// Stage: this block's part of a chunk of a producer stream; Notify: the last block
    /// of the set posts the chunk's flag.
    ///
    /// # Safety
    /// As [`Engine::run`].
    #[inline(never)]
    unsafe fn put_chunk<A: Atom>(
        &self,
        put: &Put,
        call: &mut Call,
        part: ChunkPart,
    ) -> Result<(), Left> {
        let (slot, flag) = self.place(call, part);
        if let Some(target) = epoch::drain_target(call.epoch, part.chunk, self.geometry.slots) {
            call.wait_block::<A>(put.drain, put.drain_kind, target)?;
        }
        let (offset, at, len) = self.slice(put.len, part);
        // SAFETY: the slice lies inside the stream and inside the slot.
        unsafe {
            transfer::copy::<A>(
                Coop::block(),
                self.slot_ptr(call, call.me(), put.region, slot).add(offset),
                put.src.add(at),
                len,
                self.smem,
            )
        };
        if call.arrive(call.counter(Counter::Put, put.region, slot), part.set) {
            call.post_to(put.notify, SignalKind::Data, flag);
        }
        Ok(())
    }

    /// Consume: this block's part of a chunk of a copying consumer stream ([`Get::Copy`] or
    /// [`Get::Local`]).
    ///
    /// # Safety
    /// As [`Engine::run`].
    #[inline(never)]
    unsafe fn copy_chunk<A: Atom>(
        &self,
        call: &mut Call,
        get: &Get,
        part: ChunkPart,
    ) -> Result<(), Left> {
        let (slot, flag) = self.place(call, part);
        let (offset, at, len) = self.slice(get.len(), part);
        match *get {
            Get::Copy {
                peer,
                region,
                dst,
                len: total,
                wait,
            } => {
                call.wait_block::<A>(Ranks::One(peer), wait, flag)?;
                // SAFETY: the slice lies inside the peer's slot and inside `dst`.
                unsafe {
                    transfer::copy::<A>(
                        Coop::block(),
                        dst.add(at),
                        self.slot_ptr(call, peer, region, slot).add(offset),
                        len,
                        self.smem,
                    )
                };
                if self.posts_consumed(part, total)
                    && call.arrive(call.counter(Counter::Consumed, peer, slot), part.set)
                {
                    call.post_to(Ranks::One(peer), SignalKind::Consumed, flag);
                }
            }
            Get::Local { src, dst, .. } => {
                // SAFETY: the slice lies inside both buffers.
                unsafe {
                    transfer::copy::<A>(Coop::block(), dst.add(at), src.add(at), len, self.smem)
                };
            }
            // Reductions go to `reduce_chunk`.
            Get::Reduce { .. } => {}
        }
        Ok(())
    }

    /// Consume: this block's part of a chunk of a reducing consumer stream ([`Get::Reduce`]),
    /// reduced with `reducer`.
    ///
    /// # Safety
    /// As [`Engine::run`].
    #[inline(never)]
    unsafe fn reduce_chunk<A: Atom, R: Reducer>(
        &self,
        call: &mut Call,
        get: &Get,
        part: ChunkPart,
        reducer: R,
    ) -> Result<(), Left> {
        let Get::Reduce {
            region,
            len: total,
            dst,
            post,
        } = *get
        else {
            return Ok(());
        };
        let (slot, flag) = self.place(call, part);
        let (offset, at, len) = self.slice(total, part);
        call.wait_block::<A>(Ranks::All, SignalKind::Data, flag)?;
        let out = if dst.is_null() {
            // SAFETY: in place, in this rank's own region.
            unsafe { self.slot_ptr(call, call.me(), region, slot).add(offset) }
        } else {
            // SAFETY: the slice lies inside `dst`.
            unsafe { dst.add(at) }
        };
        let mut srcs = [core::ptr::null::<u8>(); MAX_SOURCES];
        for (p, src) in srcs.iter_mut().enumerate().take(call.world() as usize) {
            *src = self
                .slot_ptr(call, p as u32, region, slot)
                .wrapping_add(offset);
        }
        // Decided before the reduction, so that little stays live across it (the datapath's
        // registers come on top of those).
        let announce = post == SignalKind::Gather || self.posts_consumed(part, total);
        let counter = call.counter(Counter::Reduce, 0, slot);
        // SAFETY: every source slice lies inside its rank's slot; `out` as above.
        unsafe {
            reducer.reduce::<A>(
                Coop::block(),
                &[out],
                &srcs[..call.world() as usize],
                len as u64,
                self.smem,
            )
        };
        if announce && call.arrive(counter, part.set) {
            call.post_to(Ranks::All, post, flag);
        }
        Ok(())
    }
}
