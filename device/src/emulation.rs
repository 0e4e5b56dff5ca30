//! CPU emulation: the *same* device code (SNAC, layouts, the [`Host`] Atom) on CPU threads, one
//! thread per (rank, block), with every rank's staging, signals and local state in host
//! memory. It is how the protocol is tested without a GPU (the host crate's collectives run
//! only on a GPU; a host-memory `purlin::Context` gives the emulation its buffers).
//!
//! A [`Communicator`] owns `world` ranks' buffers (zeroed, 16-byte aligned) and keeps them
//! across calls, so epochs, staging halves and cyclic slots carry over exactly as on a GPU.
//! [`Communicator::launch`] runs any per-block body (a fused kernel, say); [`Communicator::run`]
//! runs one collective from a run-time description. A rank can be left out of a launch (its
//! threads never start), which must end in a timeout [`Fault`] on the others naming it.
//!
//! ```
//! use purlin_device::emulation::{Buffer, Communicator, Launch};
//! use purlin_device::element::DataType;
//! use purlin_device::op::ReduceOpKind;
//! use purlin_device::collective::CollectiveKind;
//! let comm = Communicator::builder(3).build().unwrap();
//! let src: Vec<Buffer> = (0..3).map(|r| Buffer::from_slice(&[r as f32 + 1.0; 7])).collect();
//! let dst: Vec<Buffer> = (0..3).map(|_| Buffer::zeroed(28)).collect();
//! let launch = Launch::new(CollectiveKind::AllReduce, 28).typed(DataType::F32, ReduceOpKind::Sum);
//! comm.run(&launch, &src, &dst, None).unwrap();
//! assert_eq!(dst[2].as_slice::<f32>(), &[6.0; 7]);
//! ```

use crate::arch;
use crate::atom::Host;
use crate::collective;
use crate::collective::{CollectiveKind, Fault};
use crate::context::{Context, LocalState, MAX_RANKS, WorkspaceLayout};
use crate::element::{DataType, Element};
use crate::op::{ReduceOp, ReduceOpKind, TypedVisitor, dispatch};
use crate::snac::symmetric::{PeerAccess, PeersReach};
use crate::snac::{Latency, Plan, Runtime, SnacArgs, smem_bytes};
use core::fmt;
use std::sync::RwLock;
use std::time::Duration;
use std::vec::Vec;

/// A heap buffer, zeroed and 16-byte aligned, that emulated blocks on several threads may
/// read and write through raw pointers, as kernels do device memory.
///
/// The host side only ever sees copies: [`bytes`](Self::bytes) and [`as_slice`](Self::as_slice)
/// return owned values and [`write`](Self::write) and [`fill`](Self::fill) copy in, each under
/// the buffer's lock, which [`Communicator::run`] and [`Communicator::run_queued`] hold (for
/// writing, on every buffer a call may write) while their blocks run. So no safe code can read
/// a buffer while an emulated block writes it, or keep a reference into it across a launch.
/// [`Communicator::launch`] runs an arbitrary body and takes no lock: the body's own `unsafe`
/// writes carry that contract.
pub struct Buffer {
    ptr: *mut u128,
    words: usize,
    len: usize,
    access: RwLock<()>,
}

// SAFETY: the buffer owns its memory, reached only through raw pointers: by emulated blocks
// under the collectives' contracts (no two writers of one byte, readers synchronised by
// signals) and by the host accessors under `access`.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// `len` zero bytes.
    ///
    /// # Panics
    /// When the memory cannot be allocated; [`try_zeroed`](Self::try_zeroed) returns an error
    /// instead.
    pub fn zeroed(len: usize) -> Self {
        match Self::try_zeroed(len) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }

    /// `len` zero bytes, or [`EmulationError::Memory`] when they cannot be allocated.
    ///
    /// ```
    /// use purlin_device::emulation::{Buffer, EmulationError};
    /// assert_eq!(Buffer::try_zeroed(48).unwrap().len(), 48);
    /// assert!(matches!(Buffer::try_zeroed(usize::MAX), Err(EmulationError::Memory(_))));
    /// ```
    pub fn try_zeroed(len: usize) -> Result<Self, EmulationError> {
        let words = len.div_ceil(16).max(1);
        let refused = EmulationError::Memory(len as u64);
        let layout = std::alloc::Layout::array::<u128>(words).map_err(|_| refused.clone())?;
        // SAFETY: the layout is not zero-sized (at least one word).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut u128;
        if ptr.is_null() {
            return Err(refused);
        }
        Ok(Self {
            ptr,
            words,
            len,
            access: RwLock::new(()),
        })
    }

    /// A copy of `values`.
    pub fn from_slice<T: Copy>(values: &[T]) -> Self {
        let b = Self::zeroed(core::mem::size_of_val(values));
        b.write(values);
        b
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte, for reading (by emulated blocks).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr as *const u8
    }

    /// The first byte, for writing (by emulated blocks: the buffer is shared by them).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr as *mut u8
    }

    /// The address, as a [`Context`] holds it.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// A copy of the contents (waits for a launch that may write the buffer to end).
    pub fn bytes(&self) -> Vec<u8> {
        let _reading = self.access.read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `len` initialised bytes; writers (host accessors and launches that may write
        // this buffer) hold the write lock.
        unsafe { core::slice::from_raw_parts(self.ptr as *const u8, self.len) }.to_vec()
    }

    /// A copy of `len` bytes from `offset` (clipped to the buffer), under the same lock.
    pub fn bytes_at(&self, offset: usize, len: usize) -> Vec<u8> {
        let _reading = self.access.read().unwrap_or_else(|e| e.into_inner());
        let from = offset.min(self.len);
        let to = offset.saturating_add(len).min(self.len);
        // SAFETY: `from..to` lies inside the `len` initialised bytes; writers hold the lock.
        unsafe { core::slice::from_raw_parts((self.ptr as *const u8).add(from), to - from) }
            .to_vec()
    }

    /// A copy of the contents as `T`s (`len / size_of::<T>()` of them).
    pub fn as_slice<T: Element>(&self) -> Vec<T> {
        let _reading = self.access.read().unwrap_or_else(|e| e.into_inner());
        // SAFETY: 16-byte aligned, initialised bytes; every bit pattern is a valid element;
        // writers hold the write lock.
        unsafe {
            core::slice::from_raw_parts(self.ptr as *const T, self.len / core::mem::size_of::<T>())
        }
        .to_vec()
    }

    /// Overwrites the contents with `values` (at most `len` bytes).
    pub fn write<T: Copy>(&self, values: &[T]) {
        let _writing = self.access.write().unwrap_or_else(|e| e.into_inner());
        let bytes = core::mem::size_of_val(values).min(self.len);
        // SAFETY: inside the buffer; every other host access and every launch that may touch
        // the buffer is excluded by the lock.
        unsafe {
            core::ptr::copy_nonoverlapping(values.as_ptr() as *const u8, self.as_mut_ptr(), bytes)
        };
    }

    /// Fills every byte with `byte` (to poison an output).
    pub fn fill(&self, byte: u8) {
        let _writing = self.access.write().unwrap_or_else(|e| e.into_inner());
        // SAFETY: inside the buffer; excluded as in `write`.
        unsafe { core::ptr::write_bytes(self.as_mut_ptr(), byte, self.len) };
    }
}

/// The locks a run holds on its buffers: every distinct buffer once, for writing if any call
/// may write it, in address order (so two runs sharing buffers cannot deadlock).
struct Held<'a> {
    _guards: Vec<Guard<'a>>,
}

#[allow(dead_code)]
enum Guard<'a> {
    Read(std::sync::RwLockReadGuard<'a, ()>),
    Write(std::sync::RwLockWriteGuard<'a, ()>),
}

impl<'a> Held<'a> {
    /// Locks `buffers` (each with whether it may be written).
    fn lock(buffers: impl IntoIterator<Item = (&'a Buffer, bool)>) -> Self {
        let mut unique: std::collections::BTreeMap<u64, (&'a Buffer, bool)> = Default::default();
        for (b, written) in buffers {
            let e = unique.entry(b.addr()).or_insert((b, false));
            e.1 |= written;
        }
        let guards = unique
            .into_values()
            .map(|(b, written)| {
                if written {
                    Guard::Write(b.access.write().unwrap_or_else(|e| e.into_inner()))
                } else {
                    Guard::Read(b.access.read().unwrap_or_else(|e| e.into_inner()))
                }
            })
            .collect();
        Self { _guards: guards }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `alloc_zeroed` with this layout (valid then, so now).
        unsafe {
            std::alloc::dealloc(
                self.ptr as *mut u8,
                std::alloc::Layout::array::<u128>(self.words).expect("allocated with it"),
            )
        };
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// What can go wrong in the emulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmulationError {
    /// `world` is 0 or above [`MAX_RANKS`].
    World(u32),
    /// A launch asked for 0 or more than `MAX_BLOCKS` blocks.
    Blocks(u32),
    /// Fewer buffers than ranks were given, or a buffer smaller than the call needs.
    Buffers,
    /// A launch asked for 0 or more than [`MAX_THREADS`] threads per block.
    Threads(u32),
    /// A buffer of this many bytes (a rank's workspace, say) could not be allocated, or its
    /// size passes 64 bits ([`u64::MAX`]).
    Memory(u64),
    /// Queued calls faulted: `(index of the call the rank stopped at, its fault)` for each rank
    /// that recorded one, in rank order.
    QueuedFaults(Vec<(usize, Fault)>),
    /// One or more ranks recorded a fault (one per rank that did, in rank order).
    Faults(Vec<Fault>),
}

impl fmt::Display for EmulationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::World(w) => write!(f, "world {w} is not in 1..={MAX_RANKS}"),
            Self::Blocks(b) => write!(f, "{b} blocks is not in 1..={}", crate::context::MAX_BLOCKS),
            Self::Buffers => write!(f, "every rank needs buffers that hold what the call moves"),
            Self::Threads(t) => write!(f, "{t} threads per block is not in 1..={MAX_THREADS}"),
            Self::Memory(bytes) => write!(f, "cannot allocate a buffer of {bytes} bytes"),
            Self::QueuedFaults(faults) => {
                write!(f, "{} rank(s) faulted", faults.len())?;
                for (call, fault) in faults {
                    write!(f, "; call {call}: {fault}")?;
                }
                Ok(())
            }
            Self::Faults(faults) => {
                write!(f, "{} rank(s) faulted", faults.len())?;
                for fault in faults {
                    write!(f, "; {fault}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for EmulationError {}

/// Sizes and timeout of an emulated communicator.
#[derive(Clone, Copy, Debug)]
pub struct CommunicatorBuilder {
    world: u32,
    staging_half_bytes: u64,
    latency_window_bytes: u64,
    timeout: Duration,
    symmetric: bool,
    reach: Option<Option<u32>>,
}

impl CommunicatorBuilder {
    /// Whether the ranks reach each other's ordinary buffers, as ranks of one process do (the
    /// host's in-process contexts): every call then says so ([`PeersReach`]), and the calls
    /// above the packet paths exchange their buffers' addresses at entry and run one pass over
    /// them. `unreachable` names a rank whose buffers the others cannot reach: every rank then
    /// stages those calls, as it learns at entry. Off by default.
    ///
    /// ```
    /// use purlin_device::emulation::{Buffer, Communicator, Launch};
    /// use purlin_device::collective::CollectiveKind;
    /// let comm = Communicator::builder(2).peers_reach(true, None).build().unwrap();
    /// let src: Vec<Buffer> = (0..2).map(|r| Buffer::from_slice(&[r as u8; 64 << 10])).collect();
    /// let dst: Vec<Buffer> = (0..2).map(|_| Buffer::zeroed(128 << 10)).collect();
    /// comm.run(&Launch::new(CollectiveKind::AllGather, 64 << 10), &src, &dst, None).unwrap();
    /// assert_eq!(dst[0].bytes()[(64 << 10)..], src[1].bytes()[..]);
    /// ```
    pub fn peers_reach(mut self, on: bool, unreachable: Option<u32>) -> Self {
        self.reach = on.then_some(unreachable);
        self
    }

    /// Whether every call's buffers (but AllToAllV's) are symmetric: each rank's call then gets the
    /// table of every rank's `src` and `dst` of the same call (the host's `SymmetricBuffer`
    /// does this on a GPU), and runs one pass over the peers' buffers where the collective
    /// can. Off by default.
    ///
    /// ```
    /// use purlin_device::emulation::{Buffer, Communicator, Launch};
    /// use purlin_device::collective::CollectiveKind;
    /// let comm = Communicator::builder(2).symmetric_buffers(true).build().unwrap();
    /// let src: Vec<Buffer> = (0..2).map(|r| Buffer::from_slice(&[r as u8; 64 << 10])).collect();
    /// let dst: Vec<Buffer> = (0..2).map(|_| Buffer::zeroed(128 << 10)).collect();
    /// comm.run(&Launch::new(CollectiveKind::AllGather, 64 << 10), &src, &dst, None).unwrap();
    /// assert_eq!(dst[0].bytes()[(64 << 10)..], src[1].bytes()[..]);
    /// ```
    pub fn symmetric_buffers(mut self, symmetric: bool) -> Self {
        self.symmetric = symmetric;
        self
    }

    /// Bytes of one throughput staging half (small values force cyclic staging).
    pub fn staging_half_bytes(mut self, bytes: u64) -> Self {
        self.staging_half_bytes = bytes;
        self
    }

    /// Bytes of one latency window (one sender's packets, one half; a multiple of 32).
    pub fn latency_window_bytes(mut self, bytes: u64) -> Self {
        self.latency_window_bytes = bytes;
        self
    }

    /// How long a wait may spin before the call faults.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Allocates every rank's buffers: [`EmulationError::World`] for a world outside
    /// `1..=MAX_RANKS`, [`EmulationError::Memory`] when the buffers cannot be allocated.
    ///
    /// ```
    /// use purlin_device::emulation::{Communicator, EmulationError};
    /// let too_big = Communicator::builder(2).staging_half_bytes(u64::MAX).build();
    /// assert!(matches!(too_big, Err(EmulationError::Memory(_))));
    /// ```
    pub fn build(self) -> Result<Communicator, EmulationError> {
        if self.world == 0 || self.world as usize > MAX_RANKS {
            return Err(EmulationError::World(self.world));
        }
        let layout = WorkspaceLayout::new(
            self.world,
            self.staging_half_bytes,
            self.latency_window_bytes,
        );
        let staging = layout
            .checked_staging_bytes()
            .and_then(|b| usize::try_from(b).ok())
            .ok_or(EmulationError::Memory(u64::MAX))?;
        let ranks = (0..self.world)
            .map(|_| {
                Ok(RankMemory {
                    staging: Buffer::try_zeroed(staging)?,
                    signals: Buffer::try_zeroed(layout.signal_bytes() as usize)?,
                    state: Buffer::try_zeroed(layout.state_bytes() as usize)?,
                })
            })
            .collect::<Result<_, EmulationError>>()?;
        Ok(Communicator {
            layout,
            timeout_ns: self.timeout.as_nanos().min(u64::MAX as u128) as u64,
            ranks,
            symmetric: self.symmetric,
            reach: self.reach,
        })
    }
}

struct RankMemory {
    staging: Buffer,
    signals: Buffer,
    state: Buffer,
}

/// `world` emulated ranks and their symmetric and local buffers.
pub struct Communicator {
    layout: WorkspaceLayout,
    timeout_ns: u64,
    ranks: Vec<RankMemory>,
    symmetric: bool,
    /// Whether the ranks reach each other's ordinary buffers, and which rank's they do not.
    reach: Option<Option<u32>>,
}

/// The symmetric-buffer tables of one call: every rank's `src` and `dst` (all ranks address
/// them alike, being threads of one process).
struct Tables {
    src: Vec<u64>,
    dst: Vec<u64>,
}

impl Tables {
    /// What names the emulation's symmetric buffers in every call digest.
    const BUFFERS: u64 = 1 | (2 << 32);

    fn of<'b>(calls: impl Iterator<Item = (&'b Buffer, &'b Buffer)>) -> Self {
        let (src, dst) = calls.map(|(s, d)| (s.addr(), d.addr())).unzip();
        Self { src, dst }
    }

    /// Marks a call's arguments symmetric (every call whose collective has a one-pass form over
    /// symmetric buffers: not AllToAllV's, which only exchanged addresses give).
    fn apply(&self, kind: CollectiveKind, args: &mut SnacArgs) {
        if !matches!(
            kind.semantics().peers,
            PeerAccess::None | PeerAccess::ReadAnnounced
        ) {
            args.src_peers = self.src.as_ptr();
            args.dst_peers = self.dst.as_ptr();
            args.buffers = Self::BUFFERS;
        }
    }
}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Communicator")
            .field("layout", &self.layout)
            .field("timeout_ns", &self.timeout_ns)
            .finish()
    }
}

impl Communicator {
    /// A builder: 64 KiB staging halves, 16 KiB latency windows, 10 s timeout.
    pub fn builder(world: u32) -> CommunicatorBuilder {
        CommunicatorBuilder {
            world,
            staging_half_bytes: 64 << 10,
            latency_window_bytes: 16 << 10,
            symmetric: false,
            reach: None,
            timeout: Duration::from_secs(10),
        }
    }

    /// Ranks.
    pub fn world(&self) -> u32 {
        self.layout.world
    }

    /// The buffer sizes.
    pub fn layout(&self) -> WorkspaceLayout {
        self.layout
    }

    /// Rank `rank`'s context, as a kernel of that rank receives it.
    ///
    /// # Panics
    /// When `rank` is not below [`world`](Self::world).
    pub fn context(&self, rank: u32) -> Context {
        let mut staging = [0u64; MAX_RANKS];
        let mut signals = [0u64; MAX_RANKS];
        for (r, m) in self.ranks.iter().enumerate() {
            staging[r] = m.staging.addr();
            signals[r] = m.signals.addr();
        }
        Context {
            staging,
            signals,
            state: self.ranks[rank as usize].state.addr(),
            staging_half_bytes: self.layout.staging_half_bytes,
            latency_window_bytes: self.layout.latency_window_bytes,
            timeout_ns: self.timeout_ns,
            rank,
            world: self.layout.world,
        }
    }

    /// The fault recorded by `rank`, if any (`None` for a rank outside the world).
    pub fn fault(&self, rank: u32) -> Option<Fault> {
        let record = self
            .ranks
            .get(rank as usize)?
            .state
            .bytes_at(LocalState::FAULT, LocalState::FAULT_BYTES);
        Fault::decode(record.as_slice().try_into().ok()?)
    }

    /// Runs `body(rank, block, ctx, smem)` on one thread per (rank, block), `blocks` blocks
    /// per rank, every rank but `absent`; returns when all are done. `smem` is the block's
    /// shared memory ([`smem_bytes::<Host>()`](smem_bytes) bytes). Errors with every present
    /// rank's fault if any recorded one.
    pub fn launch<F>(&self, blocks: u32, absent: Option<u32>, body: F) -> Result<(), EmulationError>
    where
        F: Fn(u32, u32, Context, *mut u8) + Sync,
    {
        self.launch_threads(blocks, 1, absent, body)
    }

    /// [`launch`](Self::launch) with `threads` CPU threads per block: `body` runs on each of
    /// them, where `arch::thread_index`, `arch::block_threads` and `arch::sync_block` behave as
    /// on a GPU block of that size (see `arch::as_block_thread`).
    pub fn launch_threads<F>(
        &self,
        blocks: u32,
        threads: u32,
        absent: Option<u32>,
        body: F,
    ) -> Result<(), EmulationError>
    where
        F: Fn(u32, u32, Context, *mut u8) + Sync,
    {
        check_shape(blocks, threads)?;
        let body = &body;
        std::thread::scope(|scope| {
            for rank in (0..self.world()).filter(|r| Some(*r) != absent) {
                scope.spawn(move || self.run_blocks(rank, blocks, threads, body));
            }
        });
        let faults: Vec<Fault> = (0..self.world())
            .filter(|r| Some(*r) != absent)
            .filter_map(|r| self.fault(r))
            .collect();
        if faults.is_empty() {
            Ok(())
        } else {
            Err(EmulationError::Faults(faults))
        }
    }

    /// One kernel of `rank`: `blocks × threads` CPU threads, returning when all of them are
    /// done (as a kernel on a stream: the next one starts only then).
    fn run_blocks<F>(&self, rank: u32, blocks: u32, threads: u32, body: &F)
    where
        F: Fn(u32, u32, Context, *mut u8) + Sync,
    {
        let ctx = self.context(rank);
        let smems: Vec<Buffer> = (0..blocks)
            .map(|_| Buffer::zeroed(smem_bytes::<Host>() as usize))
            .collect();
        std::thread::scope(|scope| {
            for (block, smem) in (0..blocks).zip(&smems) {
                let barrier = arch::BlockBarrier::new(threads);
                let smem_addr = smem.addr();
                for thread in 0..threads {
                    let barrier = barrier.clone();
                    scope.spawn(move || {
                        let me = arch::BlockThread {
                            thread,
                            threads,
                            block,
                            blocks,
                            barrier,
                            smem: smem_addr as *mut u8,
                        };
                        arch::as_block_thread(me, || body(rank, block, ctx, smem.as_mut_ptr()));
                    });
                }
            }
        });
    }

    /// Runs every rank's queue of calls the way a GPU runs one stream per rank: rank `r`
    /// runs `queues[r]` in order, each call starting when all of its own blocks finished the
    /// one before, with no join across ranks between calls, so a fast rank runs ahead into
    /// later calls while a slow one is still in an earlier one. Before each call a rank may
    /// sleep up to `schedule.max_delay` (drawn from `schedule.seed`), so the overlap happens
    /// every way round. A rank whose call faults stops there (its peers then time out).
    ///
    /// Every call of `queues[r]` must be the same call, in the same order, as on every other
    /// rank (only the buffers differ), as for collectives on a GPU.
    ///
    /// ```
    /// use purlin_device::emulation::{Buffer, Communicator, Launch, Queued, Schedule};
    /// use purlin_device::collective::CollectiveKind;
    /// let comm = Communicator::builder(2).build().unwrap();
    /// let src: Vec<Buffer> = (0..2).map(|r| Buffer::from_slice(&[r as u8; 100])).collect();
    /// let dst: Vec<Vec<Buffer>> = (0..2).map(|_| (0..3).map(|_| Buffer::zeroed(200)).collect()).collect();
    /// let launch = Launch::new(CollectiveKind::AllGather, 100);
    /// let queues: Vec<Vec<Queued>> = (0..2)
    ///     .map(|r| dst[r].iter().map(|d| Queued { launch, src: &src[r], dst: d, counts: None }).collect())
    ///     .collect();
    /// comm.run_queued(&queues, &Schedule::default()).unwrap();
    /// assert_eq!(&dst[1][2].bytes()[100..], &[1u8; 100][..]);
    /// ```
    pub fn run_queued(
        &self,
        queues: &[Vec<Queued<'_>>],
        schedule: &Schedule,
    ) -> Result<(), EmulationError> {
        let world = self.world() as usize;
        if queues.len() < world {
            return Err(EmulationError::Buffers);
        }
        for queue in &queues[..world] {
            for q in queue {
                check_shape(q.launch.blocks, q.launch.threads)?;
                q.check_buffers(self.world())?;
            }
        }
        // Call `i`'s tables, from every rank's call `i` (every queue holds the same calls).
        let longest = queues[..world].iter().map(Vec::len).max().unwrap_or(0);
        let tables: Vec<Tables> = if self.symmetric {
            (0..longest)
                .filter(|&i| queues[..world].iter().all(|q| i < q.len()))
                .map(|i| Tables::of(queues[..world].iter().map(|q| (q[i].src, q[i].dst))))
                .collect()
        } else {
            Vec::new()
        };
        let tables = &tables;
        let _held = Held::lock(queues[..world].iter().flatten().flat_map(|q| {
            [(q.src, false), (q.dst, true)]
                .into_iter()
                .chain(q.counts.map(|c| (c, false)))
        }));
        let stopped: Vec<Option<usize>> = std::thread::scope(|scope| {
            let ranks: Vec<_> = (0..self.world())
                .map(|rank| {
                    let queue = &queues[rank as usize];
                    scope.spawn(move || {
                        let mut rng =
                            schedule.seed ^ 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(rank as u64 + 1);
                        for (i, q) in queue.iter().enumerate() {
                            if Some(rank) == q.launch.absent {
                                continue;
                            }
                            let delay = schedule.max_delay.as_nanos() as u64;
                            if delay > 0 {
                                let ns = splitmix(&mut rng) % (delay + 1);
                                std::thread::sleep(Duration::from_nanos(ns));
                            }
                            let l = q.launch;
                            self.run_blocks(
                                rank,
                                l.blocks,
                                l.threads,
                                &|rank, block, ctx, smem| {
                                    let mut args = q.args(block, smem, &ctx);
                                    args.peers_reach = self.reach_of(rank);
                                    if let Some(t) = tables.get(i) {
                                        t.apply(l.collective, &mut args);
                                    }
                                    // SAFETY: the buffers were checked against the launch and live
                                    // for the whole run; every rank makes the same calls.
                                    unsafe { call(l, args, ctx) };
                                    debug_assert_eq!(rank, ctx.rank);
                                },
                            );
                            if self.fault(rank).is_some() {
                                return Some(i);
                            }
                        }
                        None
                    })
                })
                .collect();
            ranks
                .into_iter()
                .map(|h| h.join().unwrap_or(Some(usize::MAX)))
                .collect()
        });
        let faults: Vec<(usize, Fault)> = (0..self.world())
            .filter_map(|r| Some((stopped[r as usize]?, self.fault(r)?)))
            .collect();
        if faults.is_empty() {
            Ok(())
        } else {
            Err(EmulationError::QueuedFaults(faults))
        }
    }

    /// Runs one collective: `src[r]` and `dst[r]` are rank `r`'s buffers, `counts[r]` its V
    /// counts (u64, in device-memory form). Sizes as [`SnacArgs`] documents.
    pub fn run(
        &self,
        launch: &Launch,
        src: &[Buffer],
        dst: &[Buffer],
        counts: Option<&[Buffer]>,
    ) -> Result<(), EmulationError> {
        let world = self.world() as usize;
        if src.len() < world
            || dst.len() < world
            || (launch.collective.is_v() && counts.is_none_or(|c| c.len() < world))
        {
            return Err(EmulationError::Buffers);
        }
        for r in 0..world {
            let q = Queued {
                launch: *launch,
                src: &src[r],
                dst: &dst[r],
                counts: counts.map(|c| &c[r]),
            };
            q.check_buffers(self.world())?;
        }
        let _held = Held::lock(
            src[..world]
                .iter()
                .map(|b| (b, false))
                .chain(dst[..world].iter().map(|b| (b, true)))
                .chain(
                    counts
                        .into_iter()
                        .flat_map(|c| c[..world].iter().map(|b| (b, false))),
                ),
        );
        let l = *launch;
        let tables = self
            .symmetric
            .then(|| Tables::of(src[..world].iter().zip(&dst[..world])));
        self.launch_threads(l.blocks, l.threads, l.absent, |rank, block, ctx, smem| {
            let r = rank as usize;
            let q = Queued {
                launch: l,
                src: &src[r],
                dst: &dst[r],
                counts: counts.map(|c| &c[r]),
            };
            let mut args = q.args(block, smem, &ctx);
            args.peers_reach = self.reach_of(rank);
            if let Some(t) = &tables {
                t.apply(l.collective, &mut args);
            }
            // SAFETY: every rank's buffers were checked against the launch and are live for
            // it; every rank makes the same call (as on a GPU).
            unsafe { call(l, args, ctx) };
        })
    }
}

impl Communicator {
    /// What rank `rank`'s calls say of their buffers' reach.
    fn reach_of(&self, rank: u32) -> PeersReach {
        match self.reach {
            None => PeersReach::None,
            Some(Some(r)) if r == rank => PeersReach::Unreachable,
            Some(_) => PeersReach::Reachable,
        }
    }
}

fn check_shape(blocks: u32, threads: u32) -> Result<(), EmulationError> {
    if blocks == 0 || blocks as usize > crate::context::MAX_BLOCKS {
        return Err(EmulationError::Blocks(blocks));
    }
    if threads == 0 || threads > MAX_THREADS {
        return Err(EmulationError::Threads(threads));
    }
    Ok(())
}

/// The most CPU threads an emulated block may have.
pub const MAX_THREADS: u32 = 64;

/// splitmix64: the delays of [`Communicator::run_queued`] (no dependency for one line).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How [`Communicator::run_queued`] staggers the ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// Each rank sleeps a random time up to this before each of its calls.
    pub max_delay: Duration,
    /// Seed of the delays.
    pub seed: u64,
}

/// One call of one rank's queue: the launch (the same on every rank) and this rank's buffers.
#[derive(Clone, Copy, Debug)]
pub struct Queued<'a> {
    /// The call.
    pub launch: Launch,
    /// This rank's input.
    pub src: &'a Buffer,
    /// This rank's output.
    pub dst: &'a Buffer,
    /// This rank's V counts (u64 each, device-memory form), for the V collectives.
    pub counts: Option<&'a Buffer>,
}

impl Queued<'_> {
    /// The arguments of block `block` on `ctx`'s rank, with the shared memory a host launch
    /// would give: only SNAC's scratch when the call is lean (see
    /// [`lean`](crate::collective::lean)), so the emulation runs the lean paths with the
    /// scratch where the device finds it then.
    fn args(&self, block: u32, smem: *mut u8, ctx: &Context) -> SnacArgs {
        let l = &self.launch;
        let mut args = SnacArgs::new(self.dst.as_mut_ptr(), self.src.as_ptr(), l.bytes, l.blocks)
            .bounded(self.src.len() as u64, self.dst.len() as u64, l.max_count);
        args.block = block;
        args.smem = smem;
        args.plan = l.plan;
        args.elem_bytes = l.elem_bytes;
        args.direct_min_bytes = l.direct_min_bytes;
        if let Some(c) = self.counts {
            args.counts = c.as_ptr() as *const u64;
        }
        if l.collective.reduces() && l.collective.is_v() {
            args.elem_bytes = l.dtype.size() as u32;
        }
        let bound = crate::collective::stream_bound(l.collective, &args);
        if crate::collective::lean(
            l.collective,
            ctx.world,
            bound,
            &l.plan,
            ctx.latency_window_bytes,
        ) {
            args.smem_bytes = crate::snac::SNAC_SMEM_BYTES;
        }
        args
    }

    /// Whether the call has what the device cannot check itself: V counts (`counts_per_rank ×
    /// world` of them) in a buffer that holds them. Everything else — sizes against
    /// the buffers' lengths, counts against `max_count` and the buffers — the collectives
    /// check on the device from the capacities [`args`](Self::args) passes, and refuse.
    fn check_buffers(&self, world: u32) -> Result<(), EmulationError> {
        let kind = self.launch.collective;
        if !kind.is_v() {
            return Ok(());
        }
        let needed = (kind.semantics().counts_per_rank * world) as usize;
        match self.counts {
            Some(c) if c.len() >= needed * 8 => Ok(()),
            _ => Err(EmulationError::Buffers),
        }
    }
}

/// One collective call, described at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Which collective.
    pub collective: CollectiveKind,
    /// Element type (reductions).
    pub dtype: DataType,
    /// Operator (reductions).
    pub op: ReduceOpKind,
    /// `SnacArgs::bytes`.
    pub bytes: u64,
    /// `SnacArgs::elem_bytes` (copy V collectives).
    pub elem_bytes: u32,
    /// Blocks per rank.
    pub blocks: u32,
    /// CPU threads per block (as a GPU block's threads: 1 to [`MAX_THREADS`]).
    pub threads: u32,
    /// The tuning knobs.
    pub plan: Plan,
    /// A rank whose threads never start.
    pub absent: Option<u32>,
    /// Reductions: run the `_op` forms (the operator chosen at run time, as the host-launched
    /// kernels do) instead of the static ones.
    pub runtime_op: bool,
    /// V collectives: `SnacArgs::max_count`, the largest count any entry may hold.
    pub max_count: u64,
    /// V collectives over buffers the peers reach: `SnacArgs::direct_min_bytes`, from which
    /// size they take the one pass (0: always).
    pub direct_min_bytes: u64,
}

impl Launch {
    /// `collective` of `bytes` (f32 sum, 1-byte elements for copies, 2 blocks of 1 thread,
    /// default plan, static operator).
    pub fn new(collective: CollectiveKind, bytes: u64) -> Self {
        Self {
            collective,
            dtype: DataType::F32,
            op: ReduceOpKind::Sum,
            bytes,
            elem_bytes: 1,
            blocks: 2,
            threads: 1,
            plan: Plan::DEFAULT,
            absent: None,
            runtime_op: false,
            max_count: u64::MAX,
            direct_min_bytes: 0,
        }
    }

    /// With element type and operator.
    pub fn typed(mut self, dtype: DataType, op: ReduceOpKind) -> Self {
        self.dtype = dtype;
        self.op = op;
        self
    }
}

/// Calls the device entry point of `launch.collective` on this thread.
///
/// # Safety
/// As the entry point.
unsafe fn call(launch: Launch, args: SnacArgs, ctx: Context) {
    // The host launches a lean call (only SNAC's scratch, see `Queued::args`) from the
    // latency-only build of its kernels: so do the copies and the run-time-operator forms here.
    let latency = args.smem_bytes == crate::snac::SNAC_SMEM_BYTES;
    struct Typed {
        collective: CollectiveKind,
        args: SnacArgs,
        ctx: Context,
        op: Option<ReduceOpKind>,
        latency: bool,
    }
    /// The dispatch of every collective, from the list: copies directly, reductions through
    /// the element type and operator ([`TypedVisitor`]).
    macro_rules! calls {
        ($($(#[$doc:meta])* $kind:ident = $code:literal, $short:literal,
            $datapath:ident $(($op:ident))? => $file:ident::{$entry:ident, $semantics:ident};)*) => {
            impl TypedVisitor for Typed {
                type Output = ();
                fn visit<T: Element, O: ReduceOp>(self) {
                    let (a, c) = (&self.args, &self.ctx);
                    match self.collective {
                        $(CollectiveKind::$kind => {
                            calls!(@reduce $datapath $(($op))? $entry, T, O, a, c, self.op, self.latency)
                        })*
                    }
                }
            }
            // SAFETY: forwarded contract.
            unsafe {
                match launch.collective {
                    $(CollectiveKind::$kind => calls!(@copy $datapath $(($op))? $entry, launch, args, ctx, latency),)*
                }
            }
        };
        (@reduce reduce($op:ident) $entry:ident, $t:ty, $o:ty, $a:ident, $c:ident, $runtime:expr, $latency:expr) => {
            // SAFETY: forwarded contract.
            unsafe {
                match $runtime {
                    None => collective::$entry::<Host, Runtime, $t, $o>($a, $c),
                    Some(op) if $latency => collective::$op::<Host, Latency, $t>($a, $c, op),
                    Some(op) => collective::$op::<Host, Runtime, $t>($a, $c, op),
                }
            }
        };
        (@reduce copy $entry:ident, $t:ty, $o:ty, $a:ident, $c:ident, $runtime:expr, $latency:expr) => {{}};
        (@copy reduce($op:ident) $entry:ident, $launch:ident, $args:ident, $ctx:ident, $latency:ident) => {
            dispatch(
                $launch.dtype,
                $launch.op,
                Typed {
                    collective: $launch.collective,
                    args: $args,
                    ctx: $ctx,
                    op: $launch.runtime_op.then_some($launch.op),
                    latency: $latency,
                },
            )
        };
        (@copy copy $entry:ident, $launch:ident, $args:ident, $ctx:ident, $latency:ident) => {
            if $latency {
                collective::$entry::<Host, Latency>(&$args, &$ctx)
            } else {
                collective::$entry::<Host, Runtime>(&$args, &$ctx)
            }
        };
    }
    crate::for_each_collective!(calls);
}
