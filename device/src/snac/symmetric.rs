//! The symmetric regime: one pass over the peers' own buffers, no staging.
//!
//! When a call's buffers are *symmetric* — allocated on every rank together and mapped in
//! every peer, so that [`SnacArgs::src_peers`] (and for AllReduce [`SnacArgs::dst_peers`])
//! give every rank's copy — a rank can read its peers' inputs and write their outputs itself.
//! A collective then describes one rank's share as a few *moves* (`OnePass`): *pull* a
//! part of a peer's `src` into this rank's `dst` (AllToAll, AllGather onto ordinary outputs),
//! *push* this rank's `src` into every rank's `dst` (AllGather onto symmetric outputs: each
//! input read once), or *reduce* a range of every rank's `src`, in rank order, into this rank's
//! `dst` (ReduceScatter) or into every rank's (AllReduce, each rank its own shard). A push, and
//! an AllReduce's reduction, loads each byte once and stores it into every rank's output.
//!
//! Two meetings frame the pass. At entry every block waits for every peer's arrival packets
//! and compares their digests (`Call::rendezvous`): a peer that arrived has started its
//! kernel, so what its stream did before (filling `src`, reading the last `dst`) is done, and
//! its digest names the same buffers ([`SnacArgs::buffers`]). At exit the last block of each
//! rank posts [`SignalKind::Gather`] (flag `epoch + 1`, inside the call's flags as the
//! consecutive-calls rule asks) to every peer once all its moves are done, and block 0 waits
//! for every peer's: no rank ends the call, and lets its stream reuse its buffers, while a
//! peer still reads or writes them.
//!
//! Ordinary buffers take the same pass where the ranks share one address space
//! ([`PeersReach`]): the tables are then this call's addresses, exchanged beside the arrival
//! (`Call::announce_addresses`, `Call::rendezvous_exchanging`) instead of mapped ahead, and the
//! digest says that every rank sent them (`digest::EXCHANGES_ADDRESSES`). A collective whose
//! ranks cannot compute where their parts lie in a peer's input (AllToAllV: each rank holds
//! only its own counts) has each rank announce to each peer the address of the part meant for
//! it ([`PeerAccess::ReadAnnounced`]).

use super::SnacArgs;
use super::epoch;
use super::fault::{Refusal, SignalKind};
use super::sync::{Call, Counter, Left, Ranks};
use super::trace::Point;
use super::transfer::{self, Reducer};
use crate::atom::{Atom, MAX_DESTINATIONS, MAX_SOURCES};
use crate::coop::Coop;
use crate::partition::split_bytes;

/// One move of one rank in a one-pass call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Move {
    /// `len` bytes at `src_at` of `peer`'s `src` to `dst_at` of this rank's `dst` (nothing
    /// when both are the same memory: the in-place AllGather's own part).
    Pull {
        peer: u32,
        src_at: u64,
        dst_at: u64,
        len: u64,
    },
    /// `len` bytes at `src_at` of this rank's `src` to `dst_at` of every rank's `dst` (nothing
    /// where both are the same memory: the in-place AllGather's own part).
    Push { src_at: u64, dst_at: u64, len: u64 },
    /// `len` bytes at `src_at` of `peer`'s `src` to `dst_at` of every rank's `dst`: a slice of
    /// another rank's part, when the ranks share the parts out evenly.
    Spread {
        peer: u32,
        src_at: u64,
        dst_at: u64,
        len: u64,
    },
    /// The reduction over ranks `0..world`, in order, of `len` bytes at `src_at` of every
    /// rank's `src`, into `dst_at` of the output `into` names.
    Reduce {
        src_at: u64,
        dst_at: u64,
        len: u64,
        into: Output,
    },
}

impl Move {
    /// Bytes the move covers.
    #[inline(always)]
    pub(crate) const fn len(self) -> u64 {
        match self {
            Move::Pull { len, .. }
            | Move::Push { len, .. }
            | Move::Spread { len, .. }
            | Move::Reduce { len, .. } => len,
        }
    }
}

/// Whose `dst` a reduction is stored into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Output {
    /// This rank's.
    Own,
    /// Every rank's (AllReduce, each rank its own shard).
    Every,
    /// That rank's (a slice of its part, when the ranks share the parts out evenly).
    Rank(u32),
}

/// Which of its peers' symmetric buffers a collective's one pass uses, depending on which of
/// a call's buffers are symmetric: the rule a collective declares, from which SNAC takes what
/// one call may touch (and the host which buffer tables to pass).
///
/// ```
/// use purlin_device::snac::symmetric::PeerAccess;
/// assert_ne!(PeerAccess::Read, PeerAccess::None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerAccess {
    /// No one pass: the call always stages (a rank cannot compute where its part lies in a
    /// peer's buffers).
    None,
    /// Reads every rank's `src` and writes every rank's `dst`: both must be symmetric.
    ReadWrite,
    /// Writes every rank's `dst` (a push) when it is symmetric, reading every rank's `src` too
    /// when that is symmetric as well (the ranks then share the parts out evenly); else reads
    /// every rank's `src` (a pull).
    WriteElseRead,
    /// Reads every rank's `src`, and writes every rank's `dst` when that is symmetric too (the
    /// ranks then share the parts out evenly).
    ReadMaybeWrite,
    /// Reads every rank's `src`.
    Read,
    /// Reads, from every rank's `src`, the part meant for this rank at the address that rank
    /// announces for it (`OnePass::announced`): a rank's layout is its own (AllToAllV's
    /// counts), so only its owner knows where a part lies. Only over ordinary buffers the
    /// peers reach ([`PeersReach`]), whose addresses the ranks exchange anyway; symmetric
    /// buffers of ranks in several processes stage.
    ReadAnnounced,
}

/// Whether a rank's peers can reach its ordinary buffers ([`SnacArgs::peers_reach`]).
///
/// Ranks that share one address space (threads of one process: on one GPU, or on GPUs with
/// peer access) can address each other's ordinary device memory. Their calls above the packet
/// paths then need no symmetric buffers to run one pass: block 0 sends every peer this call's
/// `src` and `dst` addresses in packets beside its arrival (`0` when the peers cannot reach
/// them), every block collects them after the entry meeting, and the call runs the symmetric
/// regime over them — or, when one rank's buffers are out of reach, the staged regime on every
/// rank alike. The exit meeting keeps every buffer in use until no peer touches it.
///
/// ```
/// use purlin_device::snac::{PeersReach, SnacArgs};
/// let args = SnacArgs::new(core::ptr::null_mut(), core::ptr::null(), 0, 1);
/// assert_eq!(args.peers_reach, PeersReach::None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u32)]
pub enum PeersReach {
    /// The ranks do not share an address space (or the caller does not say): ordinary buffers
    /// are staged.
    #[default]
    None = 0,
    /// The ranks share one and the peers reach this call's `src` and `dst`.
    Reachable = 1,
    /// The ranks share one, but the peers cannot reach this call's buffers (memory they have
    /// no access to): every rank stages this call.
    Unreachable = 2,
}

/// Which of the peers' buffers a one-pass call may touch: every rank's `src` (`reads`) and
/// every rank's `dst` (`writes`); `announced` when each rank's entry of the `src` table is
/// where its part for this rank starts ([`PeerAccess::ReadAnnounced`]: a pull's `src_at` is
/// then 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reach {
    pub(crate) reads: bool,
    pub(crate) writes: bool,
    pub(crate) announced: bool,
}

/// Rank `me`'s even slice of a layout of `total` bytes (`world` nearly equal slices in 16-byte
/// units). The ranks share out uneven parts (the V forms' counts) this way, each moving its
/// slice whoever owns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EvenSlice {
    lo: u64,
    hi: u64,
}

impl EvenSlice {
    /// Rank `me`'s slice of `total` bytes over `world` ranks.
    #[inline(always)]
    pub(crate) fn of(me: u32, world: u32, total: u64) -> Self {
        let (lo, n) = split_bytes(total as usize, 16, world as usize, me as usize);
        Self {
            lo: lo as u64,
            hi: (lo + n) as u64,
        }
    }

    /// Where the bytes of `part` (offset and length in the layout) lie inside the slice, as
    /// offset and length in the layout; `None` when they miss it.
    #[inline(always)]
    pub(crate) fn cut(self, part: (u64, u64)) -> Option<(u64, u64)> {
        let (at, len) = part;
        let from = if at > self.lo { at } else { self.lo };
        let end = at + len;
        let to = if end < self.hi { end } else { self.hi };
        (from < to).then(|| (from, to - from))
    }
}

/// Every rank once, starting at `me` (so that the ranks start on different peers).
#[inline(always)]
pub(crate) fn ranks_from(me: u32, world: u32) -> impl Iterator<Item = u32> {
    (me..world).chain(0..me)
}

/// One rank's moves in a one-pass call: what a collective's layouts mean over symmetric
/// buffers. A peer's offsets must be computable by this rank, which holds for the fixed-size
/// layouts and for AllGatherV's and ReduceScatterV's (every rank holds the same counts).
pub(crate) trait OnePass {
    /// Calls `each` with this rank's moves in order. A move that moves nothing may be left out,
    /// and should be: every block pays for every move it is given (the V forms' even shares
    /// give a rank one or two parts of `world`).
    fn moves(&self, reach: Reach, each: impl FnMut(Move));
    /// Where this rank's part for `peer` starts in its `src`, for a collective whose peers
    /// cannot compute it ([`PeerAccess::ReadAnnounced`]): the rank announces it to the peer.
    fn announced(&self, _peer: u32) -> u64 {
        0
    }
}

/// Every rank's copy of one symmetric buffer, as this rank addresses them, and where the call's
/// range starts in it (the same offset on every rank: the digest compares it).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peers {
    table: *const u64,
    offset: u64,
}

/// Offsets past this are no buffer's: a table whose own entry lies above the address, or far
/// below it, does not name the caller's buffer.
const MAX_OFFSET: u64 = 1 << 48;

impl Peers {
    /// The buffer `addr` lies in, by this rank's entry of `table`; `None` if the table is
    /// missing or its entry for `rank` is not where `addr` could lie.
    ///
    /// # Safety
    /// A non-null `table` holds `world > rank` addresses.
    #[inline(always)]
    unsafe fn of(table: *const u64, rank: u32, addr: u64) -> Option<Self> {
        if table.is_null() {
            return None;
        }
        // SAFETY: forwarded contract.
        let base = unsafe { table.add(rank as usize).read() };
        let offset = addr.wrapping_sub(base);
        (addr >= base && offset < MAX_OFFSET).then_some(Self { table, offset })
    }

    /// Byte `at` of the call's range in `rank`'s copy.
    ///
    /// # Safety
    /// `rank < world` (the table holds `world` addresses).
    #[inline(always)]
    unsafe fn at(self, rank: u32, at: u64) -> *mut u8 {
        // SAFETY: forwarded contract.
        let base = unsafe { self.table.add(rank as usize).read() };
        base.wrapping_add(self.offset).wrapping_add(at) as *mut u8
    }
}

/// A call's symmetric buffers: every rank's `src` when the call reads the peers' inputs, every
/// rank's `dst` when it writes the peers' outputs (AllReduce both, an AllGather whose outputs
/// are symmetric pushes: `dst` only).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Symmetric {
    src: Option<Peers>,
    dst: Option<Peers>,
    /// What the call digest compares (see [`Symmetric::digest_word`]; 0 for exchanged
    /// addresses, which the digest's shape flags instead).
    word: u64,
    /// Whether the `src` table holds the peers' parts for this rank (see [`Reach`]).
    announced: bool,
}

impl Symmetric {
    /// The symmetric buffers of a call on rank `rank` whose collective accesses its peers'
    /// buffers as `access` says, if it has them (`Ok(None)`: ordinary buffers,
    /// [`SnacArgs::buffers`] 0, or [`PeerAccess::None`]). Refused
    /// ([`Refusal::SymmetricBuffers`]) when a table the call uses is missing or does not hold
    /// the buffer the call's address lies in at `rank`: a rank must never take another rank's
    /// buffer for its own.
    ///
    /// # Safety
    /// Non-null tables hold `world > rank` addresses.
    #[inline(always)]
    pub(crate) unsafe fn of(
        args: &SnacArgs,
        rank: u32,
        access: PeerAccess,
    ) -> Result<Option<Self>, Refusal> {
        if args.buffers == 0 || matches!(access, PeerAccess::None | PeerAccess::ReadAnnounced) {
            return Ok(None);
        }
        // SAFETY (both): forwarded contract.
        let src = || unsafe { Peers::of(args.src_peers, rank, args.src as u64) };
        let dst = || unsafe { Peers::of(args.dst_peers, rank, args.dst as u64) };
        // The tables the call must have, and the ones it may have (then used, so checked).
        let (has_src, has_dst) = (!args.src_peers.is_null(), !args.dst_peers.is_null());
        let (reads, writes) = match access {
            PeerAccess::ReadWrite => (true, true),
            PeerAccess::WriteElseRead if has_dst => (has_src, true),
            PeerAccess::ReadMaybeWrite => (true, has_dst),
            _ => (true, false),
        };
        let src = if reads {
            Some(src().ok_or(Refusal::SymmetricBuffers)?)
        } else {
            None
        };
        let dst = if writes {
            Some(dst().ok_or(Refusal::SymmetricBuffers)?)
        } else {
            None
        };
        let buffers = super::digest::hash(&[
            args.buffers,
            src.map_or(u64::MAX, |p| p.offset),
            dst.map_or(u64::MAX, |p| p.offset),
        ]) as u64;
        Ok(Some(Self {
            src,
            dst,
            word: (buffers | 1) << 32,
            announced: false,
        }))
    }

    /// The buffers of a call whose ranks exchanged their ordinary buffers' addresses
    /// ([`PeersReach`]): `table` holds every rank's `src` address, then at `MAX_RANKS` every
    /// rank's `dst`. Which of them the call uses follows its collective's `access` as for
    /// symmetric buffers of both kinds: both tables where it reads and writes (AllReduce, and
    /// a V collective whose ranks share uneven parts out evenly, `apart` from its in-place
    /// form); `dst` for a push (AllGather(V) otherwise); `src` for the others, where with
    /// [`PeerAccess::ReadAnnounced`] each rank's entry is its part for this rank.
    ///
    /// # Safety
    /// `table` holds `2 × MAX_RANKS` addresses, the first `world` of each half filled in.
    #[inline(always)]
    pub(crate) unsafe fn exchanged(
        table: *const u64,
        access: PeerAccess,
        is_v: bool,
        apart: bool,
    ) -> Option<Self> {
        let (reads, writes) = match access {
            PeerAccess::None => return None,
            PeerAccess::ReadWrite => (true, true),
            PeerAccess::WriteElseRead | PeerAccess::ReadMaybeWrite if is_v && apart => (true, true),
            PeerAccess::WriteElseRead => (false, true),
            PeerAccess::ReadMaybeWrite | PeerAccess::Read | PeerAccess::ReadAnnounced => {
                (true, false)
            }
        };
        let half = |on: bool, h: usize| {
            // SAFETY: the table holds `2 × MAX_RANKS` addresses.
            on.then(|| Peers {
                table: unsafe { table.add(h * crate::context::MAX_RANKS) },
                offset: 0,
            })
        };
        Some(Self {
            src: half(reads, 0),
            dst: half(writes, 1),
            word: 0,
            announced: access == PeerAccess::ReadAnnounced,
        })
    }

    /// What the call digest's last packet adds for a call over symmetric buffers, in its high
    /// 32 bits (never 0 for them: 0 means ordinary buffers, whose exchanged addresses the shape
    /// packet flags instead; the low 32 bits hold a V call's counts): the buffers'
    /// identity ([`SnacArgs::buffers`]) and where the call's ranges start in them, so that
    /// every rank reads and writes the ranges its peers passed.
    #[inline(always)]
    pub(crate) const fn digest_word(&self) -> u64 {
        self.word
    }

    /// Which of the peers' buffers the call touches.
    #[inline(always)]
    pub(crate) const fn reach(&self) -> Reach {
        Reach {
            reads: self.src.is_some(),
            writes: self.dst.is_some(),
            announced: self.announced,
        }
    }
}

/// A block's slice of a copy of at most this many bytes goes to a group of its warps, the
/// next such slice to the next group, rather than to the whole block in turn: the slices'
/// loads are then in flight together. A block that copied its eight 2 KiB slices of an 8-rank
/// AllGatherV of 256 KiB one after another waited a memory round trip for each (6-13 µs).
/// Larger slices take the Atom's bulk-copy engine (from 64 KiB per block on sm_90).
const GROUP_COPY_BYTES: u64 = 64 * 1024;
/// The unit of the groups of [`GROUP_COPY_BYTES`]: a warp on the GPU (so no warp splits
/// between two copies); eight threads on the host, whose emulated blocks are 1 to 64 threads,
/// so that the CPU tests deal copies out to several groups too.
#[cfg(target_arch = "nvptx64")]
const WARP_THREADS: u32 = 32;
#[cfg(not(target_arch = "nvptx64"))]
const WARP_THREADS: u32 = 8;

/// Runs this block's share of `moves` over the symmetric buffers `sym` (this rank's own are
/// `src` and `dst`), reducing with `reducer`, after the entry meeting (the caller's
/// [`Call::rendezvous`]) and up to the exit meeting (see the module docs). Every block takes an even, 16-byte-aligned slice of every move; a push or a
/// reduction into every rank's output loads each byte once and stores it into every output
/// ([`Atom::copy_to_all`], [`Atom::reduce_to_all`]).
///
/// # Safety
/// The peers' buffers hold what the moves address (every rank checked its own before
/// arriving, and the digest says they all made this call on these buffers); the moves need
/// the tables `sym` has (pulls, spreads and reductions every rank's `src`; pushes, spreads and
/// reductions into other ranks' outputs every rank's `dst`); `smem` as [`Atom::copy`] needs;
/// every thread of every block of the call calls, after the rendezvous.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run<A: Atom, M: OnePass, R: Reducer>(
    call: &mut Call,
    moves: &M,
    sym: Symmetric,
    src: *const u8,
    dst: *mut u8,
    blocks: u32,
    reducer: R,
    smem: *mut u8,
) -> Result<(), Left> {
    let (me, world) = (call.me(), call.world());
    let block = call.block;
    let share = |len: u64| {
        let (at, n) = split_bytes(len as usize, 16, blocks as usize, block as usize);
        (at as u64, n as u64)
    };
    // Every rank's copy of byte `at` of `peers`' range, this rank's first (so that the ranks
    // start on different peers), leaving out `except` (the in-place AllGather's own part);
    // returns how many.
    let every_rank =
        |peers: Peers, at: u64, except: *const u8, out: &mut [*mut u8; MAX_DESTINATIONS]| {
            let mut n = 0;
            for q in ranks_from(me, world) {
                // SAFETY: `q < world`.
                let to = unsafe { peers.at(q, at) };
                if !core::ptr::eq(to, except) {
                    out[n] = to;
                    n += 1;
                }
            }
            n
        };
    let reach = sym.reach();
    // Small copies are dealt out to groups of warps, one copy per group in turn (see
    // `GROUP_COPY_BYTES`): as many groups as there are such copies, up to one per warp.
    // (`n` is this block's slice of the move.)
    let small = |step: &Move, n: u64| {
        !matches!(step, Move::Reduce { .. }) && (1..=GROUP_COPY_BYTES).contains(&n)
    };
    let mut smalls = 0u32;
    moves.moves(reach, |step| {
        smalls += small(&step, share(step.len()).1) as u32
    });
    let warps = (call.threads / WARP_THREADS).max(1);
    let groups = smalls.clamp(1, warps);
    let group_threads = call.threads / groups / WARP_THREADS * WARP_THREADS;
    let (group, lane) = (
        call.tid / group_threads.max(1),
        call.tid % group_threads.max(1),
    );
    let mut dealt = 0u32;
    // Copies `n` bytes from `from` into every output: a small copy of aligned ranges by the
    // group whose turn it is, in registers; any other by the whole block through the Atom.
    let mut copy = |outputs: &[*mut u8], from: *const u8, n: u64, is_small: bool| {
        let aligned = outputs
            .iter()
            .all(|d| (*d as usize ^ from as usize) & 15 == 0);
        if is_small && aligned && groups > 1 {
            let turn = dealt % groups;
            dealt += 1;
            if group == turn {
                // SAFETY: the caller's ranges (see below); the group's threads only.
                unsafe {
                    transfer::copy_to_all_in_registers(
                        Coop::new(lane, group_threads),
                        outputs,
                        from,
                        n as usize,
                    )
                };
            }
        } else if let [to] = outputs {
            // SAFETY: as the caller's.
            unsafe { transfer::copy::<A>(Coop::block(), *to, from, n as usize, smem) };
        } else {
            // SAFETY: as the caller's.
            unsafe { transfer::copy_to_all::<A>(Coop::block(), outputs, from, n as usize, smem) };
        }
    };
    call.mark(Point::Sent);
    moves.moves(reach, |step| {
        // This block's slice of the move: nothing to address when it is empty.
        let (at, n) = share(step.len());
        if n == 0 {
            return;
        }
        let is_small = small(&step, n);
        match step {
            Move::Pull {
                peer,
                src_at,
                dst_at,
                ..
            } => {
                let Some(peers) = sym.src else {
                    return;
                };
                // SAFETY: `peer < world`; the slice lies inside the part, which lies inside the
                // peer's `src` and this rank's `dst` (checked by their owners).
                let from = unsafe { peers.at(peer, src_at + at) };
                let to = dst.wrapping_add((dst_at + at) as usize);
                if !core::ptr::eq(from, to) {
                    copy(&[to], from, n, is_small);
                }
            }
            Move::Push { src_at, dst_at, .. } | Move::Spread { src_at, dst_at, .. } => {
                let Some(peers) = sym.dst else {
                    return;
                };
                let from = match (step, sym.src) {
                    // SAFETY: `peer < world`; the slice lies inside `peer`'s part of its `src`.
                    (Move::Spread { peer, .. }, Some(inputs)) => unsafe {
                        inputs.at(peer, src_at + at)
                    },
                    (Move::Spread { .. }, None) => return,
                    _ => src.wrapping_add((src_at + at) as usize),
                };
                let mut outputs = [core::ptr::null_mut(); MAX_DESTINATIONS];
                let count = every_rank(peers, dst_at + at, from, &mut outputs);
                // The slice lies inside its owner's `src` (this rank's for a push) and inside
                // every rank's `dst`, alike on every rank; no output is the input (left out
                // above).
                copy(&outputs[..count], from, n, is_small);
            }
            Move::Reduce {
                src_at,
                dst_at,
                into,
                ..
            } => {
                let Some(inputs) = sym.src else {
                    return;
                };
                let mut srcs = [core::ptr::null::<u8>(); MAX_SOURCES];
                for (p, s) in srcs.iter_mut().enumerate().take(world as usize) {
                    // SAFETY: `p < world`.
                    *s = unsafe { inputs.at(p as u32, src_at + at) };
                }
                let mut outputs = [core::ptr::null_mut(); MAX_DESTINATIONS];
                let count = match (into, sym.dst) {
                    (Output::Every, Some(peers)) => {
                        every_rank(peers, dst_at + at, core::ptr::null(), &mut outputs)
                    }
                    (Output::Rank(q), Some(peers)) => {
                        // SAFETY: `q < world` (a part's owner).
                        outputs[0] = unsafe { peers.at(q, dst_at + at) };
                        1
                    }
                    _ => {
                        outputs[0] = dst.wrapping_add((dst_at + at) as usize);
                        1
                    }
                };
                // SAFETY: every source lies inside its rank's `src` and every output inside its
                // rank's `dst` (the slice is inside the range the move names, alike on every
                // rank); an output may be a source (in place), which the Atom allows.
                unsafe {
                    reducer.reduce::<A>(
                        Coop::block(),
                        &outputs[..count],
                        &srcs[..world as usize],
                        n,
                        smem,
                    )
                };
            }
        }
    });
    call.mark(Point::Received);
    let flag = epoch::flag(call.epoch, 0);
    if call.arrive(call.counter(Counter::Reduce, 0, 0), blocks) {
        call.post_to(Ranks::Others, SignalKind::Gather, flag);
    }
    if call.block == 0 {
        call.wait_block::<A>(Ranks::Others, SignalKind::Gather, flag)?;
    }
    Ok(())
}
