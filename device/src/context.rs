//! The context a collective kernel takes (as a kernel parameter, read in place by the
//! collectives through a reference): where every rank's symmetric buffers are,
//! where this rank's local protocol state is, and the sizes. `#[repr(C)]` and `Copy`, the same
//! bytes on host and device; the host fills it once per communicator (see `purlin::Context`).
//!
//! Memory a communicator owns, per rank:
//! - **staging** (symmetric, peers read it): `[throughput half 0 | half 1 | latency half 0 |
//!   latency half 1]`; each latency half holds one window per sender.
//! - **signals** (symmetric, peers write it): monotonic `u64` flags.
//! - **state** (local): per-block epochs, last-arrival counters, the fault record.
//!
//! [`WorkspaceLayout`] says how many bytes each needs; allocate them zeroed and 16-byte
//! aligned (or more), then build the [`Context`].
//!
//! ```
//! use purlin_device::context::WorkspaceLayout;
//! let layout = WorkspaceLayout::new(4, 1 << 20, 64 << 10);
//! assert_eq!(layout.staging_bytes(), 2 * (1 << 20) + 2 * 4 * (64 << 10));
//! assert!(layout.signal_bytes() > 0 && layout.state_bytes() > 0);
//! ```

/// Most ranks in one communicator.
pub const MAX_RANKS: usize = 16;
/// Most blocks one collective launch may use (the length of the per-block epoch array).
pub const MAX_BLOCKS: usize = 64;
/// Most chunks in flight per peer (cyclic slots or resident chunks) that have their own counter.
pub const MAX_CHUNKS: usize = 256;

/// Sizes of the three allocations of one rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkspaceLayout {
    /// Ranks in the communicator.
    pub world: u32,
    /// Bytes of one throughput staging half.
    pub staging_half_bytes: u64,
    /// Bytes of one latency window (one sender's packets to one receiver, in one half).
    pub latency_window_bytes: u64,
}

impl WorkspaceLayout {
    /// A layout for `world` ranks.
    pub const fn new(world: u32, staging_half_bytes: u64, latency_window_bytes: u64) -> Self {
        Self {
            world,
            staging_half_bytes,
            latency_window_bytes,
        }
    }

    /// Bytes of the symmetric staging slab.
    pub const fn staging_bytes(&self) -> u64 {
        2 * self.staging_half_bytes + 2 * self.world as u64 * self.latency_window_bytes
    }

    /// [`staging_bytes`](Self::staging_bytes), or `None` when it does not fit 64 bits.
    ///
    /// ```
    /// use purlin_device::context::WorkspaceLayout;
    /// let l = WorkspaceLayout::new(4, 4096, 2048);
    /// assert_eq!(l.checked_staging_bytes(), Some(l.staging_bytes()));
    /// assert_eq!(WorkspaceLayout::new(4, u64::MAX, 0).checked_staging_bytes(), None);
    /// ```
    pub const fn checked_staging_bytes(&self) -> Option<u64> {
        let (Some(halves), Some(windows)) = (
            self.staging_half_bytes.checked_mul(2),
            self.latency_window_bytes.checked_mul(2 * self.world as u64),
        ) else {
            return None;
        };
        halves.checked_add(windows)
    }

    /// Offset of latency half `half` (0 or 1) in the slab.
    pub const fn latency_offset(&self, half: u64) -> u64 {
        2 * self.staging_half_bytes + half * self.world as u64 * self.latency_window_bytes
    }

    /// Bytes of the symmetric signal array: [`SIGNAL_KINDS`] × [`MAX_RANKS`] monotonic `u64`
    /// flags, then the extent packets (see [`SignalLayout`]).
    pub const fn signal_bytes(&self) -> u64 {
        SignalLayout::BYTES as u64
    }

    /// Bytes of the local protocol state.
    pub const fn state_bytes(&self) -> u64 {
        LocalState::BYTES as u64
    }
}

/// Kinds of signal each rank receives, `MAX_RANKS` words each (indexed by sender).
pub const SIGNAL_KINDS: usize = 4;

/// Byte offsets inside one rank's signal array. Peers write it; its owner reads it.
///
/// `flag(kind, sender)` is the last flag `sender` posted to this rank for that kind (see
/// `snac::SignalKind`): data ready, reduced shard ready (gather), staging slot consumed, and
/// arrival (posted once per call at entry, so a timed-out wait can name a rank that never
/// joined). After the flags come
/// - the extent packets: two halves (epoch parity) of one 16-byte packet per sender, used by
///   the variable-length all-to-all to agree on its size;
/// - the arrival packets: two halves of [`ARRIVAL_PACKETS`] packets per sender, carrying what
///   the sender's call must agree on with this rank's (the call digest: kind, element, operator,
///   sizes, blocks, plan, workspace; for AllToAllV the count it sends here);
/// - the abort records: one per sender, `[cause, time]` (`u64` each), written once by a sender
///   whose call faulted so that every peer's waits end at once (see `snac::Cause`);
/// - the address packets: two halves of [`ADDRESS_PACKETS`] packets per sender, the addresses
///   of the sender's `src` and `dst` when the ranks reach each other's ordinary buffers (see
///   `snac::symmetric`, [`PeersReach`](crate::snac::PeersReach)).
///
/// ```
/// use purlin_device::context::{SignalLayout, MAX_RANKS};
/// assert_eq!(SignalLayout::flag(0, 0), 0);
/// assert_eq!(SignalLayout::flag(1, 2), (MAX_RANKS + 2) * 8);
/// assert_eq!(SignalLayout::extent(1, 0) % 16, 0);
/// assert_eq!(SignalLayout::arrival(1, 3, 2) % 16, 0);
/// assert!(SignalLayout::abort(MAX_RANKS - 1) + 16 <= SignalLayout::ADDRESSES);
/// assert!(SignalLayout::address(1, MAX_RANKS - 1, 1) + 16 <= SignalLayout::BYTES);
/// ```
pub struct SignalLayout;

/// Packets of one sender's address record: its `src`, then its `dst`.
pub const ADDRESS_PACKETS: usize = 2;

/// Packets of one sender's arrival record (the call digest).
pub const ARRIVAL_PACKETS: usize = 4;

impl SignalLayout {
    /// Offset of the flag of `kind` (0..[`SIGNAL_KINDS`]) posted by `sender`.
    pub const fn flag(kind: usize, sender: usize) -> usize {
        (kind * MAX_RANKS + sender) * 8
    }

    /// Offset of the first extent packet.
    pub const EXTENTS: usize = SIGNAL_KINDS * MAX_RANKS * 8;

    /// Offset of the extent packet of `sender` in half `half` (0 or 1).
    pub const fn extent(half: usize, sender: usize) -> usize {
        Self::EXTENTS + (half * MAX_RANKS + sender) * 16
    }

    /// Offset of the first arrival packet.
    pub const ARRIVALS: usize = Self::EXTENTS + 2 * MAX_RANKS * 16;

    /// Offset of packet `packet` (0..[`ARRIVAL_PACKETS`]) of `sender`'s arrival record in half
    /// `half`.
    pub const fn arrival(half: usize, sender: usize, packet: usize) -> usize {
        Self::ARRIVALS + ((half * MAX_RANKS + sender) * ARRIVAL_PACKETS + packet) * 16
    }

    /// Offset of the first abort record.
    pub const ABORTS: usize = Self::ARRIVALS + 2 * MAX_RANKS * ARRIVAL_PACKETS * 16;

    /// Offset of `sender`'s abort record: its cause (0: none), then the time it faulted.
    pub const fn abort(sender: usize) -> usize {
        Self::ABORTS + sender * 16
    }

    /// Offset of the first address packet.
    pub const ADDRESSES: usize = Self::ABORTS + MAX_RANKS * 16;

    /// Offset of packet `packet` (0: `src`, 1: `dst`) of `sender`'s address record in half
    /// `half`.
    pub const fn address(half: usize, sender: usize, packet: usize) -> usize {
        Self::ADDRESSES + ((half * MAX_RANKS + sender) * ADDRESS_PACKETS + packet) * 16
    }

    /// Total bytes.
    pub const BYTES: usize = Self::ADDRESSES + 2 * MAX_RANKS * ADDRESS_PACKETS * 16;
}

/// Offsets of the local state (in bytes from `Context::state`).
pub struct LocalState;

impl LocalState {
    /// `u64` epoch per block, `MAX_BLOCKS` of them.
    pub const EPOCHS: usize = 0;
    /// `u32` last-arrival counters.
    pub const COUNTERS: usize = Self::EPOCHS + MAX_BLOCKS * 8;
    /// Number of `u32` counters: [`COUNTER_GROUPS`](Self::COUNTER_GROUPS) groups of
    /// `MAX_RANKS × MAX_CHUNKS`, indexed `[group][rank or region][slot]`.
    pub const COUNTER_WORDS: usize = Self::COUNTER_GROUPS * MAX_RANKS * MAX_CHUNKS;
    /// Counter groups: producers per staging region, consumers per peer, reducers, spare.
    pub const COUNTER_GROUPS: usize = 4;

    /// Offset of counter `slot` of `index` (a region or a peer) in `group`.
    ///
    /// ```
    /// use purlin_device::context::{LocalState, MAX_CHUNKS};
    /// assert_eq!(LocalState::counter(0, 0, 0), LocalState::COUNTERS);
    /// assert_eq!(LocalState::counter(0, 1, 0) - LocalState::counter(0, 0, 0), MAX_CHUNKS * 4);
    /// ```
    pub const fn counter(group: usize, index: usize, slot: usize) -> usize {
        Self::COUNTERS + ((group * MAX_RANKS + index) * MAX_CHUNKS + slot) * 4
    }
    /// The fault record a timed-out wait leaves for the host (see `collective::Fault`).
    pub const FAULT: usize = Self::COUNTERS + Self::COUNTER_WORDS * 4;
    /// Bytes reserved for the fault record.
    pub const FAULT_BYTES: usize = 64;
    /// The record a point-to-point window wait leaves when it runs out of time (see
    /// `snac::window::WindowFault`); right after the fault record, so the host reads both at
    /// once.
    pub const WINDOW_FAULT: usize = Self::FAULT + Self::FAULT_BYTES;
    /// Bytes of the window-wait record.
    pub const WINDOW_FAULT_BYTES: usize = 32;
    /// The times of the last traced call's phases (`u64` ns each, see `snac::trace`).
    pub const TRACE: usize = Self::WINDOW_FAULT + Self::WINDOW_FAULT_BYTES;
    /// Bytes of the trace.
    pub const TRACE_BYTES: usize = crate::snac::trace::POINTS * 8;
    /// Total bytes.
    pub const BYTES: usize = Self::TRACE + Self::TRACE_BYTES;
}

/// What a collective kernel knows about its communicator: a kernel parameter, which the
/// collectives read through a reference (`kernel_param!` reads it without a copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Context {
    /// Base address of each rank's staging slab, as this rank can address it.
    pub staging: [u64; MAX_RANKS],
    /// Base address of each rank's signal array, as this rank can address it.
    pub signals: [u64; MAX_RANKS],
    /// This rank's local state (epochs, counters, fault record).
    pub state: u64,
    /// Bytes of one throughput staging half.
    pub staging_half_bytes: u64,
    /// Bytes of one latency window.
    pub latency_window_bytes: u64,
    /// How long any wait may spin before the kernel gives up and records a fault.
    pub timeout_ns: u64,
    /// This rank.
    pub rank: u32,
    /// Ranks in the communicator.
    pub world: u32,
}

impl Context {
    /// The layout this context's buffers were allocated with.
    pub const fn layout(&self) -> WorkspaceLayout {
        WorkspaceLayout::new(
            self.world,
            self.staging_half_bytes,
            self.latency_window_bytes,
        )
    }
}
