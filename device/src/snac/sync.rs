//! One block's view of one call: its epoch, the signals it posts and awaits, last-arrival
//! counters, block-wide broadcasts, bounded waits and fault records.
//!
//! Memory ordering (as the original): a block's writes are ordered before a signal by
//! `bar.sync` and then, across blocks, by the acq_rel last-arrival counter; the signal itself
//! is a `st.release.sys`. A waiter polls with relaxed loads and, once the flag is there, does
//! one `ld.acquire.sys` before `bar.sync` lets the block read the data.

use super::digest::{self, Digest};
use super::fault::{CallKind, Cause, FaultKind, Refusal, SignalKind};
use super::trace::{self, Point};
use super::{Plan, SCRATCH_COUNTS, SCRATCH_DIGEST, epoch, packet};
use crate::arch;
use crate::atom::Atom;
use crate::context::{ARRIVAL_PACKETS, Context, LocalState, SignalLayout};
use core::cell::Cell;

/// Polls before a waiter starts sleeping between polls and watching the clock, the peers'
/// abort records and the awaited peer's digest.
const FAST_POLLS: u32 = 64;
/// Slow polls between two looks at the awaited peer's digest.
const DIGEST_POLLS: u32 = 1024;
/// Slow polls between two looks at this rank's fault word and the peers' abort records. A look
/// loads one record per peer, across the system: done on every poll, it made a waiter notice
/// its flag microseconds late.
const FAULT_POLLS: u32 = 16;
/// Sleep between slow polls (yields the thread on the host).
const SLEEP_NS: u32 = 64;

/// A set of ranks to notify or to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ranks {
    /// One rank.
    One(u32),
    /// Every rank, this one included.
    All,
    /// Every rank but this one.
    Others,
}

impl Ranks {
    /// Whether rank `q` is in the set, for a caller of rank `me`.
    #[inline(always)]
    pub(crate) const fn contains(self, q: u32, me: u32) -> bool {
        match self {
            Ranks::One(r) => q == r,
            Ranks::All => true,
            Ranks::Others => q != me,
        }
    }
}

/// Why a wait ended without its flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Left;

/// A counter group in the local state (`LocalState::counter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Counter {
    /// Producers of one staging region.
    Put = 0,
    /// Consumers of one peer's stream.
    Consumed = 1,
    /// Reducers.
    Reduce = 2,
}

/// One block in one call. It borrows the context rather than copying it: a `Context` is 296
/// bytes, which a by-value copy would carry through registers or the stack frame of every
/// function that holds a `Call`.
pub(crate) struct Call<'a> {
    pub(crate) ctx: &'a Context,
    /// What the call runs (written into fault records, never read).
    pub(crate) kind: CallKind,
    pub(crate) block: u32,
    /// The call's epoch (the same on every block of every rank).
    pub(crate) epoch: u64,
    pub(crate) tid: u32,
    pub(crate) threads: u32,
    /// SNAC's shared-memory scratch (block-wide broadcasts, the epoch, the call's digest and
    /// the V collectives' validated counts).
    scratch: *mut u32,
    toggle: usize,
    /// Whether this call writes its trace ([`Plan::trace`](super::Plan::trace)).
    trace: bool,
    /// This thread's share of the digest check, once done ([`Call::check_digests_early`]).
    digests: Cell<Digests>,
}

/// Where one thread's share of a call's digest check stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Digests {
    /// Not checked yet: [`Call::await_digests`] checks it.
    Unchecked,
    /// Every peer this thread checks posted the same digest.
    Matched,
    /// A peer's digest differed or did not come (a fault is recorded).
    Failed,
}

/// Scratch words: two alternating broadcast words, then the epoch (two words).
const EPOCH_WORD: usize = 2;

/// Threads of block 0's last warp, which check the peers' digests one peer each
/// ([`Call::keeps_digest_warp`]).
pub(crate) const DIGEST_WARP: u32 = 32;

impl<'a> Call<'a> {
    /// This block's epoch, as thread 0 reads it at the call's entry ([`Call::begin`] shares it
    /// with the block): loaded before the arguments are checked, its round trip overlaps that
    /// work instead of following it. Only thread 0's value is used (it wrote the slot at the
    /// end of the block's last call, which a call inside a kernel may have been: no other
    /// thread's program order follows that store).
    ///
    /// # Safety
    /// `ctx.state` is the rank's local state and `block < MAX_BLOCKS`; the work before the
    /// call on its stream is done (`Atom::await_prior_grids`).
    #[inline(always)]
    pub(crate) unsafe fn early_epoch(ctx: &Context, block: u32) -> u64 {
        if arch::thread_index() != 0 || ctx.state == 0 {
            return 0;
        }
        let slot = (ctx.state + (LocalState::EPOCHS + block as usize * 8) as u64) as *const u64;
        // SAFETY: the slot lies in the local state (the caller's contract).
        unsafe { arch::ld_relaxed_gpu_u64(slot) }
    }

    /// Starts a call on this block: takes its epoch (thread 0's [`early_epoch`](Self::early_epoch),
    /// which the block shares) and keeps the call's digest in the scratch. The call is traced
    /// if `plan` says so ([`trace`]): it marks [`Point::Checked`] on entry and
    /// [`Point::Begun`] once begun.
    ///
    /// # Safety
    /// `ctx` describes live buffers; `scratch` points to `SNAC_SMEM_BYTES` of this block's
    /// shared memory; `epoch` is [`early_epoch`](Self::early_epoch)'s for this block and call;
    /// every thread of the block calls, with the same digest.
    #[inline(always)]
    pub(crate) unsafe fn begin(
        ctx: &'a Context,
        kind: CallKind,
        block: u32,
        scratch: *mut u8,
        digest: &Digest,
        plan: &Plan,
        epoch: u64,
    ) -> Self {
        let mut call = Self {
            scratch: scratch as *mut u32,
            trace: plan.trace != 0,
            ..Self::detached(ctx, kind, block)
        };
        call.mark(Point::Checked);
        if call.tid == 0 {
            // SAFETY: the scratch holds SNAC_SMEM_BYTES; the digest lies at SCRATCH_DIGEST.
            unsafe {
                let d = scratch.add(SCRATCH_DIGEST) as *mut u64;
                for (k, w) in digest.iter().enumerate() {
                    d.add(k).write_volatile(*w);
                }
            }
        }
        if call.threads == 1 {
            call.epoch = epoch;
        } else {
            if call.tid == 0 {
                // SAFETY: the scratch is shared memory.
                unsafe { (call.scratch.add(EPOCH_WORD) as *mut u64).write_volatile(epoch) };
            }
            arch::sync_block();
            // SAFETY: written by thread 0 before the barrier; rewritten only by the next call,
            // after the barrier that ends this one.
            call.epoch = unsafe { (call.scratch.add(EPOCH_WORD) as *const u64).read_volatile() };
        }
        call.mark(Point::Begun);
        call
    }

    /// Word `k` of this call's digest (kept in the scratch by [`begin`](Self::begin)).
    #[inline(always)]
    fn digest_word(&self, k: usize) -> u64 {
        // SAFETY: written by thread 0 before the barrier of `begin` (with one thread, by this
        // thread), never rewritten during the call.
        unsafe {
            (self.scratch.cast::<u8>().add(SCRATCH_DIGEST) as *const u64)
                .add(k)
                .read_volatile()
        }
    }

    /// The V counts the call validated, in the scratch (`2 × MAX_RANKS` values).
    #[inline(always)]
    pub(crate) fn counts(&self) -> *mut u64 {
        // SAFETY: the scratch holds SNAC_SMEM_BYTES.
        unsafe { self.scratch.cast::<u8>().add(SCRATCH_COUNTS) as *mut u64 }
    }

    /// The `counts` packet this rank sends to `receiver`.
    #[inline(always)]
    fn counts_packet_for(&self, receiver: u32) -> u64 {
        let w = self.digest_word(3);
        if w == digest::PER_PAIR {
            // SAFETY: AllToAllV keeps `2 × world` validated counts: sent to each, then received.
            unsafe { self.counts().add(receiver as usize).read_volatile() }
        } else {
            w
        }
    }

    /// The `counts` packet this rank expects from `sender`.
    #[inline(always)]
    fn counts_expected_from(&self, sender: u32) -> u64 {
        let w = self.digest_word(3);
        if w == digest::PER_PAIR {
            // SAFETY: as in `counts_packet_for`.
            unsafe {
                self.counts()
                    .add(self.world() as usize + sender as usize)
                    .read_volatile()
            }
        } else {
            w
        }
    }

    /// A call that cannot run (invalid arguments): no epoch is read, only faults recorded.
    pub(crate) fn detached(ctx: &'a Context, kind: CallKind, block: u32) -> Self {
        Self {
            ctx,
            kind,
            block,
            epoch: 0,
            tid: arch::thread_index(),
            threads: arch::block_threads(),
            scratch: core::ptr::null_mut(),
            toggle: 0,
            trace: false,
            digests: Cell::new(Digests::Unchecked),
        }
    }

    /// Marks `point` of this call's trace (block 0's thread 0, when traced).
    #[inline(always)]
    pub(crate) fn mark(&self, point: Point) {
        trace::mark(self.ctx, self.trace, self.block, point);
    }

    /// This rank.
    #[inline(always)]
    pub(crate) const fn me(&self) -> u32 {
        self.ctx.rank
    }

    /// Ranks in the communicator.
    #[inline(always)]
    pub(crate) const fn world(&self) -> u32 {
        self.ctx.world
    }

    /// The staging half of this call.
    #[inline(always)]
    pub(crate) const fn half(&self) -> u64 {
        epoch::half(self.epoch)
    }

    #[inline(always)]
    fn epoch_slot(&self, block: u32) -> *mut u64 {
        (self.ctx.state + (LocalState::EPOCHS + block as usize * 8) as u64) as *mut u64
    }

    /// The address of the flag of `kind` that `sender` posts to `rank`.
    #[inline(always)]
    pub(crate) fn signal(&self, rank: u32, kind: SignalKind, sender: u32) -> *mut u64 {
        (self.ctx.signals[rank as usize]
            + SignalLayout::flag(kind as usize, sender as usize) as u64) as *mut u64
    }

    /// A last-arrival counter of this rank.
    #[inline(always)]
    pub(crate) fn counter(&self, group: Counter, index: u32, slot: u64) -> *mut u32 {
        (self.ctx.state + LocalState::counter(group as usize, index as usize, slot as usize) as u64)
            as *mut u32
    }

    /// The first word of this rank's fault record.
    #[inline(always)]
    fn fault_word(&self) -> *mut u32 {
        (self.ctx.state + LocalState::FAULT as u64) as *mut u32
    }

    /// Shares thread 0's `v` with the whole block (a barrier; every thread calls).
    #[inline(always)]
    pub(crate) fn broadcast(&mut self, v: u32) -> u32 {
        if self.threads == 1 {
            return v;
        }
        // Two words used alternately: thread 0 rewrites a word only after the barrier of the
        // next broadcast, which every thread passes after reading this one.
        // SAFETY: the scratch words lie in this block's shared memory.
        let word = unsafe { self.scratch.add(self.toggle) };
        self.toggle ^= 1;
        if self.tid == 0 {
            // SAFETY: as above.
            unsafe { word.write_volatile(v) };
        }
        arch::sync_block();
        // SAFETY: as above.
        unsafe { word.read_volatile() }
    }

    /// Posts `flag` of `kind` from this rank to `target`.
    #[inline(always)]
    pub(crate) fn post(&self, target: u32, kind: SignalKind, flag: u64) {
        // SAFETY: `target < world`, so its signal array is mapped; signals are only accessed
        // atomically.
        unsafe { arch::st_release_sys_u64(self.signal(target, kind, self.me()), flag) }
    }

    /// Posts `flag` of `kind` to every rank in `to`, the block's threads sharing the stores.
    /// Only called with a block-uniform condition.
    #[inline(always)]
    pub(crate) fn post_to(&self, to: Ranks, kind: SignalKind, flag: u64) {
        let mut q = self.tid;
        while q < self.world() {
            if to.contains(q, self.me()) {
                self.post(q, kind, flag);
            }
            q += self.threads;
        }
    }

    /// Announces at entry that this rank joined the call (block 0 only): the call digest in
    /// packets flagged with the call's epoch, which every peer compares with its own, and by
    /// which a peer that times out tells a rank that never came from one that is merely stuck.
    /// Packets need no fence: the announcement costs no round trip.
    #[inline(always)]
    pub(crate) fn announce_arrival(&self) {
        if self.block != 0 {
            return;
        }
        let flag = packet::flag32(self.epoch);
        // Everything but the peer's signal array is read before the first packet store: each
        // store's asm is a compiler memory barrier, after which these would be read again.
        let (me, world) = (self.me(), self.world());
        let record = SignalLayout::arrival(self.half() as usize, me as usize, 0) as u64;
        let words = [
            self.digest_word(0),
            self.digest_word(1),
            self.digest_word(2),
        ];
        let mut q = self.tid;
        while q < world {
            if q != me {
                let at = (self.ctx.signals[q as usize] + record) as *mut u8;
                let packets: Digest = [words[0], words[1], words[2], self.counts_packet_for(q)];
                for (k, v) in packets.into_iter().enumerate() {
                    // SAFETY: rank q's signal array holds this rank's arrival record, whose
                    // `ARRIVAL_PACKETS` packets lie 16 bytes apart from `at`.
                    unsafe { packet::put(at.add(k * 16), v, flag) };
                }
            }
            q += self.threads;
        }
        self.mark(Point::Announced);
    }

    /// Sends every peer this rank's `src` and `dst` addresses for this call, beside its arrival
    /// (block 0 only; `0, 0` when the peers cannot reach them): the exchange of a call whose
    /// ranks reach each other's ordinary buffers (see `symmetric::PeersReach`). The `src`
    /// address may differ per peer: `src(q)` is what peer `q` gets (where this rank's part
    /// for it starts, when only this rank knows that: `PeerAccess::ReadAnnounced`). Packets,
    /// like the arrival: a peer polls them with the call's flag.
    #[inline(always)]
    pub(crate) fn announce_addresses(&self, src: impl Fn(u32) -> u64, dst: u64) {
        if self.block != 0 {
            return;
        }
        let flag = packet::flag32(self.epoch);
        let mut q = self.tid;
        while q < self.world() {
            if q != self.me() {
                for (k, v) in [src(q), dst].into_iter().enumerate() {
                    // SAFETY: rank q's signal array holds this rank's address packets.
                    unsafe { packet::put(self.address(q, self.me(), k), v, flag) };
                }
            }
            q += self.threads;
        }
    }

    /// The symmetric regime's entry for a call whose ranks exchange their ordinary buffers'
    /// addresses ([`announce_addresses`](Self::announce_addresses)): the
    /// [`rendezvous`](Self::rendezvous), in which the thread that checks a peer's digest then
    /// collects that peer's addresses into `table` (`src` at `table[r]`, `dst` at
    /// `table[MAX_RANKS + r]`; this rank's own are `src(me)` and `dst`). One meeting, one
    /// barrier: the addresses come right behind the digest (both packets in one round trip),
    /// so they cost no wait of their own. (Loading them with the digest's packets, in the
    /// same trip, made the meeting 2-3 µs slower on an H100: `benches/RESULTS.md`.)
    /// `Ok(true)` when every rank's are reachable (none is 0), `Ok(false)` when one rank's are
    /// not, a recorded fault when a peer's digest differs or its packets never came. Every
    /// thread calls.
    ///
    /// # Safety
    /// `table` is this block's shared memory for `2 × MAX_RANKS` addresses.
    #[inline(never)]
    pub(crate) unsafe fn rendezvous_exchanging(
        &self,
        table: *mut u64,
        src: impl Fn(u32) -> u64,
        dst: u64,
    ) -> Result<bool, Left> {
        let flag = packet::flag32(self.epoch);
        let half = crate::context::MAX_RANKS;
        self.meet(|q| {
            let mut got = [src(q), dst];
            let mut ok = true;
            if q != self.me() {
                let at = [self.address(self.me(), q, 0), self.address(self.me(), q, 1)];
                let waited = self.spin(q, SignalKind::Arrival, flag as u64, || {
                    // Both packets' loads in flight before either is decoded: one trip.
                    // SAFETY: this rank's own signal array holds `q`'s address packets.
                    let raw = at.map(|p| unsafe { arch::ld_volatile_v2_u64(p as *const [u64; 2]) });
                    match (packet::decode(raw[0], flag), packet::decode(raw[1], flag)) {
                        (Ok(s), Ok(d)) => {
                            got = [s, d];
                            None
                        }
                        (Err(seen), _) | (_, Err(seen)) => Some(seen),
                    }
                });
                ok = waited.is_ok();
            }
            // SAFETY: `q < world <= MAX_RANKS`; the caller's table holds `2 × MAX_RANKS`.
            unsafe {
                table.add(q as usize).write_volatile(got[0]);
                table.add(half + q as usize).write_volatile(got[1]);
            }
            ok
        })?;
        // Every thread reads the whole table (written before the meeting's barrier): the block
        // agrees without another barrier.
        let reachable = (0..self.world() as usize).all(|q| {
            // SAFETY: as above.
            unsafe { table.add(q).read_volatile() != 0 && table.add(half + q).read_volatile() != 0 }
        });
        Ok(reachable)
    }

    /// Packet `k` of the address record `sender` writes to `rank` in this call's half.
    #[inline(always)]
    fn address(&self, rank: u32, sender: u32, k: usize) -> *mut u8 {
        (self.ctx.signals[rank as usize]
            + SignalLayout::address(self.half() as usize, sender as usize, k) as u64)
            as *mut u8
    }

    /// Whether `peer`'s arrival packets for this call are here (it launched the call).
    #[inline(always)]
    fn arrived(&self, peer: u32) -> bool {
        // SAFETY: this rank's own signal array holds `peer`'s arrival packets.
        unsafe { packet::try_get(self.arrival(self.me(), peer, 0), packet::flag32(self.epoch)) }
            .is_ok()
    }

    /// Packet `k` of the arrival record `sender` writes to `rank` in this call's half.
    #[inline(always)]
    fn arrival(&self, rank: u32, sender: u32, k: usize) -> *mut u8 {
        (self.ctx.signals[rank as usize]
            + SignalLayout::arrival(self.half() as usize, sender as usize, k) as u64)
            as *mut u8
    }

    /// Compares `peer`'s digest for this call with this rank's, if the peer has posted it:
    /// `Ok(true)` when it matches, `Ok(false)` when it is not there yet, and a recorded
    /// [`FaultKind::DigestMismatch`] when it differs.
    #[inline(never)]
    pub(crate) fn check_digest(&self, peer: u32) -> Result<bool, Left> {
        let flag = packet::flag32(self.epoch);
        // Every packet's load in flight before any is decoded: one trip, not four.
        let mut raw = [[0u64; 2]; ARRIVAL_PACKETS];
        for (k, r) in raw.iter_mut().enumerate() {
            // SAFETY: this rank's own signal array holds `peer`'s arrival packets.
            *r = unsafe {
                arch::ld_volatile_v2_u64(self.arrival(self.me(), peer, k) as *const [u64; 2])
            };
        }
        let mut theirs = [0u64; ARRIVAL_PACKETS];
        for (w, r) in theirs.iter_mut().zip(raw) {
            match packet::decode(r, flag) {
                Ok(v) => *w = v,
                Err(_) => return Ok(false),
            }
        }
        let mine = [
            self.digest_word(0),
            self.digest_word(1),
            self.digest_word(2),
            self.counts_expected_from(peer),
        ];
        match digest::compare(&mine, &theirs) {
            None => Ok(true),
            Some((field, a, b)) => {
                self.record(
                    FaultKind::DigestMismatch,
                    peer,
                    SignalKind::None,
                    a,
                    b,
                    field as u64,
                );
                Err(Left)
            }
        }
    }

    /// This thread's share of the digest check (block 0): waits until the digest of every
    /// peer it checks is there and compares it; false if one differs or a wait failed (a fault
    /// is recorded). The last threads of the block check, one peer each (thread
    /// `threads - 1 - q` checks peer `q`): the warp the packet paths keep out of the data, so
    /// that [`check_digests_early`](Self::check_digests_early) overlaps the check with the
    /// data wait.
    #[inline(always)]
    fn check_my_digests(&self) -> bool {
        self.check_my_digests_then(|_| true)
    }

    /// [`check_my_digests`](Self::check_my_digests), running `then(q)` for every rank `q` this
    /// thread checks (this rank included, which has no digest to check) once `q`'s digest
    /// matched; false too if `then` returns false.
    #[inline(never)]
    fn check_my_digests_then(&self, mut then: impl FnMut(u32) -> bool) -> bool {
        let mut ok = true;
        let mut q = self.threads - 1 - self.tid;
        while q < self.world() {
            if q != self.me() {
                let mut checked = Ok(false);
                let waited = self.spin(
                    q,
                    SignalKind::Arrival,
                    packet::flag32(self.epoch) as u64,
                    || {
                        checked = self.check_digest(q);
                        match checked {
                            Ok(false) => Some(0),
                            _ => None,
                        }
                    },
                );
                if waited.is_err() || checked.is_err() {
                    ok = false;
                }
            }
            ok = ok && then(q);
            q += self.threads;
        }
        ok
    }

    /// Whether block 0's last warp ([`DIGEST_WARP`] threads) may be kept out of a packet
    /// path's data to check the digests ([`check_digests_early`](Self::check_digests_early)):
    /// blocks of at least two warps, and one thread of that warp per peer. The path keeps it
    /// when that costs no pass.
    #[inline(always)]
    pub(crate) const fn keeps_digest_warp(&self) -> bool {
        self.threads >= 2 * DIGEST_WARP && self.ctx.world <= DIGEST_WARP
    }

    /// Checks this thread's share of the peers' digests now, on block 0, rather than at
    /// [`finish`](Self::finish): called by the packet paths between sending and receiving.
    /// The checking threads are block 0's last warp, which `warp_kept` says the path kept out
    /// of the data ([`keeps_digest_warp`](Self::keeps_digest_warp) allows it), so the check
    /// overlaps the other warps' wait for the data; otherwise the check stays at the end. (A
    /// warp that checked and then received ran the receive after the others, alone: 4-6 µs
    /// more on the H200 than the overlap saved.) Every thread of the block calls.
    #[inline(always)]
    pub(crate) fn check_digests_early(&self, warp_kept: bool) {
        if self.block == 0 && warp_kept {
            let ok = self.check_my_digests();
            self.digests.set(if ok {
                Digests::Matched
            } else {
                Digests::Failed
            });
        }
    }

    /// Waits until every peer has joined this call with this rank's digest, on every block
    /// (its threads sharing the peers; a fault is recorded otherwise): afterwards every peer's
    /// kernel runs, so whatever its stream did before the call is done. The symmetric regime's
    /// entry; block 0's digest check at [`finish`](Self::finish) is then already done. Every
    /// thread calls.
    #[inline(always)]
    pub(crate) fn rendezvous(&self) -> Result<(), Left> {
        self.meet(|_| true)
    }

    /// The rendezvous, with `then(q)` run by the thread that checked rank `q` (see
    /// [`check_my_digests_then`](Self::check_my_digests_then)), before the one barrier.
    #[inline(always)]
    fn meet(&self, mut then: impl FnMut(u32) -> bool) -> Result<(), Left> {
        let ok = self.check_my_digests_then(|q| {
            let done = then(q);
            if q != self.me() {
                // The packets were polled with plain loads: one acquire orders the reads of
                // the peer's buffers after them (and drops this SM's stale L1 lines), as a
                // flag's waiter does; the barrier below hands that on to the block.
                // SAFETY: this rank's own signal array holds `q`'s arrival packets.
                unsafe { arch::ld_acquire_sys_u64(self.arrival(self.me(), q, 0) as *const u64) };
            }
            done
        });
        if self.block == 0 {
            self.digests.set(if ok {
                Digests::Matched
            } else {
                Digests::Failed
            });
        }
        if arch::sync_block_or(!ok) {
            Err(Left)
        } else {
            Ok(())
        }
    }

    /// Waits (this block's threads sharing the peers) until every peer's digest for this call
    /// is there and compares it, unless [`check_digests_early`](Self::check_digests_early)
    /// did: how an empty call synchronises, and how every call ends on block 0. Every thread
    /// calls.
    #[inline(never)]
    pub(crate) fn await_digests(&mut self) -> Result<(), Left> {
        let ok = match self.digests.get() {
            Digests::Unchecked => self.check_my_digests(),
            Digests::Matched => true,
            Digests::Failed => false,
        };
        // Any thread's failure fails the block (that thread recorded a fault, or saw one): one
        // barrier tells every thread, with no load of the fault word after it.
        if arch::sync_block_or(!ok) {
            Err(Left)
        } else {
            Ok(())
        }
    }

    /// True once any block of this rank recorded a fault: every waiter then leaves too.
    #[inline(always)]
    pub(crate) fn aborted(&self) -> bool {
        // SAFETY: the fault word lies in the local state and is accessed atomically.
        unsafe { arch::ld_relaxed_gpu_u32(self.fault_word()) != 0 }
    }

    /// The abort record `sender` wrote to `rank`: its cause word (the time follows).
    #[inline(always)]
    fn abort_record(&self, rank: u32, sender: u32) -> *mut u64 {
        (self.ctx.signals[rank as usize] + SignalLayout::abort(sender as usize) as u64) as *mut u64
    }

    /// The peer that faulted first, if any did (its rank, cause and time), from the abort
    /// records peers wrote into this rank's signal array.
    #[inline(never)]
    fn peer_fault(&self) -> Option<(u32, u64, u64)> {
        let mut first: Option<(u32, u64, u64)> = None;
        for p in 0..self.world() {
            if p == self.me() {
                continue;
            }
            let record = self.abort_record(self.me(), p);
            // SAFETY: this rank's signal array; abort records are only accessed atomically.
            // A relaxed look first: an acquire also invalidates the L1, and most looks find none.
            let seen = unsafe { arch::ld_relaxed_sys_u64(record) };
            if seen != 0 {
                // SAFETY: as above.
                let cause = unsafe { arch::ld_acquire_sys_u64(record) };
                // SAFETY: as above; the time was stored before the cause (release).
                let time = unsafe { arch::ld_relaxed_sys_u64(record.add(1)) };
                if first.is_none_or(|(_, _, t)| time < t) {
                    first = Some((p, cause, time));
                }
            }
        }
        first
    }

    /// The rank a peer's fault (its abort record's `cause`) says never launched this call, if
    /// it never arrived here either. Such a rank is this rank's own finding, not only the
    /// peer's: reported as this rank's timeout naming it, every present rank reports the same
    /// absent rank whichever gave up first.
    #[inline(never)]
    fn also_missing(&self, cause: u64) -> Option<u32> {
        let fault = Cause::decode(cause)?;
        let q = fault.peer;
        let missing = fault.kind == FaultKind::Timeout && fault.peer_missing;
        (missing && q < self.world() && q != self.me() && !self.arrived(q)).then_some(q)
    }

    /// Spins until `poll` returns `None` (done), at most `timeout_ns`. `poll` returns
    /// `Some(observed)` while not done. Records a timeout fault (waiting for `peer`'s `kind`,
    /// flag `awaited`) on expiry; leaves at once if another block of this rank faulted, if a
    /// peer's abort record says it faulted (recording that; or, when the peer timed out on a
    /// rank that never arrived here either, this rank's own timeout naming that rank), or if
    /// `peer`'s digest for this call differs from this rank's (recording that).
    #[inline(always)]
    pub(crate) fn spin<P: FnMut() -> Option<u64>>(
        &self,
        peer: u32,
        kind: SignalKind,
        awaited: u64,
        mut poll: P,
    ) -> Result<(), Left> {
        let mut polls = 0u32;
        let mut start = 0u64;
        loop {
            let observed = match poll() {
                None => return Ok(()),
                Some(v) => v,
            };
            polls += 1;
            if polls == FAST_POLLS {
                start = arch::global_timer_ns();
            } else if polls > FAST_POLLS {
                arch::nanosleep(SLEEP_NS);
                let slow = polls - FAST_POLLS;
                if slow % FAULT_POLLS == 1 {
                    if self.aborted() {
                        return Err(Left);
                    }
                    if let Some((first, cause, time)) = self.peer_fault() {
                        match self.also_missing(cause) {
                            Some(q) => {
                                self.record(FaultKind::Timeout, q, kind, awaited, observed, 0)
                            }
                            None => {
                                self.record(FaultKind::PeerFaulted, first, kind, 0, time, cause)
                            }
                        }
                        return Err(Left);
                    }
                }
                if slow % DIGEST_POLLS == 1
                    && kind != SignalKind::Arrival
                    && peer != self.me()
                    && self.check_digest(peer).is_err()
                {
                    return Err(Left);
                }
                if arch::global_timer_ns().wrapping_sub(start) > self.ctx.timeout_ns {
                    self.record(FaultKind::Timeout, peer, kind, awaited, observed, 0);
                    return Err(Left);
                }
            }
        }
    }

    /// Waits (this thread) until `peer`'s flag of `kind` reaches `flag`: relaxed polls, then
    /// one acquire load.
    #[inline(always)]
    pub(crate) fn wait_flag(&self, peer: u32, kind: SignalKind, flag: u64) -> Result<(), Left> {
        let sig = self.signal(self.me(), kind, peer);
        self.spin(peer, kind, flag, || {
            // SAFETY: our own signal array; signals are only accessed atomically.
            let v = unsafe { arch::ld_relaxed_sys_u64(sig) };
            if v >= flag {
                // SAFETY: as above. The acquire makes the peer's writes before its release
                // visible to this thread, and the caller's barrier to the block.
                unsafe { arch::ld_acquire_sys_u64(sig) };
                None
            } else {
                Some(v)
            }
        })
    }

    /// Waits for `flag` of `kind` from every rank in `from`, the block's threads sharing the
    /// ranks (thread `q` waits for rank `q`: the wait ends one round trip after the last flag
    /// came, not one per rank later), then the block learns the outcome and orders the Atom's
    /// copies after it ([`Atom::after_wait`]). Every thread calls.
    #[inline(always)]
    pub(crate) fn wait_block<A: Atom>(
        &mut self,
        from: Ranks,
        kind: SignalKind,
        flag: u64,
    ) -> Result<(), Left> {
        let mut ok = true;
        let mut q = self.tid;
        while q < self.world() {
            if from.contains(q, self.me()) && self.wait_flag(q, kind, flag).is_err() {
                ok = false;
                break;
            }
            q += self.threads;
        }
        if arch::sync_block_or(!ok) {
            return Err(Left);
        }
        A::after_wait();
        Ok(())
    }

    /// Last arrival: after the block's work (a barrier), thread 0 counts this block in; true
    /// for the block that completes a set of `set`, which also resets the counter for its next
    /// use. Every thread calls.
    #[inline(always)]
    pub(crate) fn arrive(&mut self, counter: *mut u32, set: u32) -> bool {
        if set <= 1 {
            // Still a barrier: the caller's signal must follow every thread's writes.
            arch::sync_block();
            return true;
        }
        arch::sync_block();
        let mut last = 0;
        if self.tid == 0 {
            // SAFETY: the counter lies in the local state and is accessed atomically.
            unsafe {
                let old = arch::atom_add_acq_rel_gpu_u32(counter, 1);
                if old + 1 == set {
                    arch::st_relaxed_gpu_u32(counter, 0);
                    last = 1;
                }
            }
        }
        self.broadcast(last) == 1
    }

    /// The extent packet `sender` writes to `rank` in this call's half.
    #[inline(always)]
    fn extent(&self, rank: u32, sender: u32) -> *mut u8 {
        (self.ctx.signals[rank as usize]
            + SignalLayout::extent(self.half() as usize, sender as usize) as u64) as *mut u8
    }

    /// Block 0 tells every rank (itself included) the largest chunk count of its streams.
    #[inline(always)]
    pub(crate) fn post_extent(&self, rounds: u64) {
        if self.block != 0 {
            return;
        }
        let flag = packet::flag32(self.epoch);
        let mut q = self.tid;
        while q < self.world() {
            // SAFETY: rank q's signal array holds a packet per sender and half.
            unsafe { packet::put(self.extent(q, self.me()), rounds, flag) };
            q += self.threads;
        }
    }

    /// Waits for every rank's extent packet and returns the largest: the chunk count every
    /// rank advances its epochs by. Every thread calls.
    #[inline(never)]
    pub(crate) fn agree_extent(&mut self) -> Result<u64, Left> {
        let flag = packet::flag32(self.epoch);
        let (mut ok, mut rounds) = (1u32, 0u64);
        if self.tid == 0 {
            for p in 0..self.world() {
                let slot = self.extent(self.me(), p);
                let mut got = 0;
                let waited = self.spin(p, SignalKind::Extent, flag as u64, || {
                    // SAFETY: our own signal array's extent packet of sender p.
                    match unsafe { packet::try_get(slot, flag) } {
                        Ok(v) => {
                            got = v;
                            None
                        }
                        Err(seen) => Some(seen),
                    }
                });
                if waited.is_err() {
                    ok = 0;
                    break;
                }
                rounds = rounds.max(got);
            }
        }
        let lo = self.broadcast(rounds as u32);
        let hi = self.broadcast((rounds >> 32) as u32);
        if self.broadcast(ok) == 1 {
            Ok(lo as u64 | ((hi as u64) << 32))
        } else {
            Err(Left)
        }
    }

    /// Records a fault in this rank's local state (the first one wins) and, unless it only
    /// reports a peer's fault, writes this rank's abort record into every peer's signal array
    /// so their waits end at once. For a timeout, a peer whose arrival for this call is missing
    /// is named instead of the one awaited.
    pub(crate) fn record(
        &self,
        kind: FaultKind,
        peer: u32,
        signal: SignalKind,
        awaited: u64,
        observed: u64,
        detail: u64,
    ) {
        let mut peer = peer;
        let mut missing = 0u32;
        if kind == FaultKind::Timeout {
            for q in 0..self.world() {
                if q != self.me() && !self.arrived(q) {
                    peer = q;
                    missing = 1;
                    break;
                }
            }
        }
        let word = self.fault_word();
        // SAFETY: the fault record lies in the local state; only the block that moves the
        // count from 0 writes the other fields, and the host reads them after the kernel.
        let first = unsafe { arch::atom_add_acq_rel_gpu_u32(word, 1) == 0 };
        if !first {
            return;
        }
        // SAFETY: as above.
        unsafe {
            let w = |i: usize, v: u32| word.add(i).write_volatile(v);
            w(1, kind as u32);
            w(2, self.kind.0 as u32);
            w(3, self.me());
            w(4, peer);
            w(5, self.block);
            w(6, signal as u32);
            w(7, missing);
            let d = |i: usize, v: u64| (word.add(i) as *mut u64).write_volatile(v);
            d(8, self.epoch);
            d(10, awaited);
            d(12, observed);
            d(14, detail);
        }
        // A fault that only reports a peer's is not spread again; nor can a context whose
        // world or rank is out of range reach its peers.
        if kind == FaultKind::PeerFaulted
            || self.world() as usize > crate::context::MAX_RANKS
            || self.me() >= self.world()
        {
            return;
        }
        let cause = Cause {
            kind,
            call: self.kind,
            peer,
            signal,
            peer_missing: missing == 1,
            detail,
        }
        .encode();
        let time = arch::global_timer_ns();
        for q in 0..self.world() {
            if q != self.me() {
                let record = self.abort_record(q, self.me());
                // SAFETY: rank q's signal array holds this rank's abort record; the time is
                // stored before the cause is released.
                unsafe {
                    arch::st_relaxed_sys_u64(record.add(1), time);
                    arch::st_release_sys_u64(record, cause);
                }
            }
        }
    }

    /// Records that the arguments cannot be run (thread 0 only), with the reason, the index
    /// of the offending count, the bound and the value, and returns `Left`.
    pub(crate) fn refuse(&self, why: Refusal, index: u32, bound: u64, value: u64) -> Left {
        if self.tid == 0 {
            self.record(
                FaultKind::InvalidArgument,
                self.me(),
                SignalKind::None,
                bound,
                value,
                why as u64 | ((index as u64) << 32),
            );
        }
        Left
    }

    /// Ends the call: block 0 compares every peer's digest with this rank's (recording a
    /// mismatch), then the epoch advances by `rounds | 1` on this block (and block 0 advances
    /// the slots `blocks..coll_blocks` no block of this call owns). Every thread calls.
    #[inline(always)]
    pub(crate) fn finish(&mut self, rounds: u64, blocks: u32, coll_blocks: u32) {
        self.mark(Point::Moved);
        if self.block == 0 {
            let _ = self.await_digests();
            self.mark(Point::Digests);
        }
        let next = epoch::advance(self.epoch, rounds);
        // Every thread has read everything of this call before the epoch moves on.
        arch::sync_block();
        // SAFETY (both): the slots lie in the local state (`coll_blocks <= MAX_BLOCKS`).
        if self.tid == 0 {
            unsafe { arch::st_relaxed_gpu_u64(self.epoch_slot(self.block), next) };
        }
        // The slots no block of this call owns, one store per thread: no block reads them
        // before this kernel ends (one store after another by one thread took 1.8 µs).
        if self.block == 0 {
            let mut b = blocks.saturating_add(self.tid);
            while b < coll_blocks {
                unsafe { arch::st_relaxed_gpu_u64(self.epoch_slot(b), next) };
                b = b.saturating_add(self.threads);
            }
        }
        self.mark(Point::End);
    }
}
