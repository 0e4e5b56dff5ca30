//! The fault record a block leaves in its rank's local state when a wait runs out of time (or
//! the arguments cannot be run), and its decoded form for the host.

use core::fmt;

/// Which collective a fault happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum CollectiveKind {
    /// AllReduce.
    AllReduce = 1,
    /// AllGather.
    AllGather = 2,
    /// ReduceScatter.
    ReduceScatter = 3,
    /// AllToAll.
    AllToAll = 4,
    /// AllGatherV.
    AllGatherV = 5,
    /// ReduceScatterV.
    ReduceScatterV = 6,
    /// AllToAllV.
    AllToAllV = 7,
}

impl CollectiveKind {
    /// Every collective.
    pub const ALL: [CollectiveKind; 7] = [
        Self::AllReduce,
        Self::AllGather,
        Self::ReduceScatter,
        Self::AllToAll,
        Self::AllGatherV,
        Self::ReduceScatterV,
        Self::AllToAllV,
    ];

    /// The collective with this `repr(u32)` value, if any.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::AllReduce),
            2 => Some(Self::AllGather),
            3 => Some(Self::ReduceScatter),
            4 => Some(Self::AllToAll),
            5 => Some(Self::AllGatherV),
            6 => Some(Self::ReduceScatterV),
            7 => Some(Self::AllToAllV),
            _ => None,
        }
    }

    /// The name nccl-tests and the original print (`all_reduce`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::AllReduce => "all_reduce",
            Self::AllGather => "all_gather",
            Self::ReduceScatter => "reduce_scatter",
            Self::AllToAll => "all_to_all",
            Self::AllGatherV => "all_gather_v",
            Self::ReduceScatterV => "reduce_scatter_v",
            Self::AllToAllV => "all_to_all_v",
        }
    }

    /// True for the collectives that reduce.
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            Self::AllReduce | Self::ReduceScatter | Self::ReduceScatterV
        )
    }

    /// True for the variable-length collectives.
    pub const fn is_v(self) -> bool {
        matches!(
            self,
            Self::AllGatherV | Self::ReduceScatterV | Self::AllToAllV
        )
    }
}

/// What a block was waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum SignalKind {
    /// A peer's staged chunk (`signals[me][Data][peer]`).
    Data = 0,
    /// A peer's reduced shard (the AllReduce gather tail).
    Gather = 1,
    /// A peer having drained a staging slot this rank wants to reuse (cyclic staging).
    Consumed = 2,
    /// A peer's arrival (posted once per call; only used to diagnose).
    Arrival = 3,
    /// A latency packet from a peer.
    Packet = 4,
    /// A peer's extent packet (the size agreement of AllToAllV).
    Extent = 5,
    /// Nothing: the arguments could not be run.
    None = 6,
}

impl SignalKind {
    /// The kind with this `repr(u32)` value, if any.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            0 => Some(Self::Data),
            1 => Some(Self::Gather),
            2 => Some(Self::Consumed),
            3 => Some(Self::Arrival),
            4 => Some(Self::Packet),
            5 => Some(Self::Extent),
            6 => Some(Self::None),
            _ => None,
        }
    }

    /// A short description.
    pub const fn describe(self) -> &'static str {
        match self {
            Self::Data => "staged data",
            Self::Gather => "a reduced shard",
            Self::Consumed => "a drained staging slot",
            Self::Arrival => "its arrival",
            Self::Packet => "latency packets",
            Self::Extent => "its size",
            Self::None => "nothing",
        }
    }
}

/// Why a block left a collective early.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FaultKind {
    /// A wait ran past `Context::timeout_ns`.
    Timeout = 1,
    /// The arguments cannot be run (too many blocks or ranks, staging too small, counts
    /// missing, a size that is not a whole number of elements).
    InvalidArgument = 2,
}

impl FaultKind {
    /// The kind with this `repr(u32)` value, if any.
    pub const fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Timeout),
            2 => Some(Self::InvalidArgument),
            _ => None,
        }
    }
}

/// The raw fault record in a rank's local state (`LocalState::FAULT`), 64 bytes.
///
/// `count` is incremented by every block that faults; only the first one (the one that saw
/// 0) writes the other fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct FaultRecord {
    /// Faults recorded in this rank since the record was cleared (0: none).
    pub count: u32,
    /// [`FaultKind`].
    pub kind: u32,
    /// [`CollectiveKind`].
    pub collective: u32,
    /// The rank that recorded the fault.
    pub rank: u32,
    /// The rank it was waiting for (or, if one never joined the call, that rank).
    pub peer: u32,
    /// The block that recorded it.
    pub block: u32,
    /// [`SignalKind`] it was waiting for.
    pub signal: u32,
    /// 1 if `peer` never joined this call (its arrival signal is missing).
    pub missing: u32,
    /// The epoch of the call.
    pub epoch: u64,
    /// The flag value awaited.
    pub awaited: u64,
    /// The last value seen.
    pub observed: u64,
    /// Reserved, zero.
    pub reserved: u64,
}

const _: () =
    assert!(core::mem::size_of::<FaultRecord>() == crate::context::LocalState::FAULT_BYTES);

impl FaultRecord {
    /// Decodes the record from its bytes (little-endian, as the GPU and the host store them).
    pub fn from_bytes(bytes: &[u8; 64]) -> Self {
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        Self {
            count: u32_at(0),
            kind: u32_at(4),
            collective: u32_at(8),
            rank: u32_at(12),
            peer: u32_at(16),
            block: u32_at(20),
            signal: u32_at(24),
            missing: u32_at(28),
            epoch: u64_at(32),
            awaited: u64_at(40),
            observed: u64_at(48),
            reserved: u64_at(56),
        }
    }
}

/// A decoded fault: which collective, on which rank and block, waiting for whom and what.
///
/// ```
/// use purlin_device::snac::{CollectiveKind, Fault, FaultKind, SignalKind};
/// let mut bytes = [0u8; 64];
/// bytes[0] = 1; // count
/// bytes[4] = FaultKind::Timeout as u8;
/// bytes[8] = CollectiveKind::AllGather as u8;
/// bytes[12] = 1; // rank
/// bytes[16] = 3; // peer
/// bytes[28] = 1; // missing
/// let fault = Fault::decode(&bytes).unwrap();
/// assert_eq!((fault.rank, fault.peer, fault.peer_missing), (1, 3, true));
/// assert_eq!(fault.signal, SignalKind::Data);
/// assert!(fault.to_string().contains("rank 3"));
/// assert!(Fault::decode(&[0u8; 64]).is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Why.
    pub kind: FaultKind,
    /// In which collective.
    pub collective: CollectiveKind,
    /// The rank that recorded it.
    pub rank: u32,
    /// The rank waited for; if `peer_missing`, the rank that never joined the call.
    pub peer: u32,
    /// True when `peer` never joined the call.
    pub peer_missing: bool,
    /// The block that recorded it.
    pub block: u32,
    /// What was awaited.
    pub signal: SignalKind,
    /// The call's epoch.
    pub epoch: u64,
    /// The flag awaited.
    pub awaited: u64,
    /// The last value seen.
    pub observed: u64,
    /// How many blocks of this rank faulted.
    pub count: u32,
}

impl Fault {
    /// Decodes a rank's fault record; `None` if it holds no fault (or is malformed).
    pub fn decode(bytes: &[u8; 64]) -> Option<Self> {
        Self::from_record(&FaultRecord::from_bytes(bytes))
    }

    /// The fault in a record; `None` if it holds none (or is malformed).
    pub fn from_record(r: &FaultRecord) -> Option<Self> {
        if r.count == 0 {
            return None;
        }
        Some(Self {
            kind: FaultKind::from_u32(r.kind)?,
            collective: CollectiveKind::from_u32(r.collective)?,
            rank: r.rank,
            peer: r.peer,
            peer_missing: r.missing != 0,
            block: r.block,
            signal: SignalKind::from_u32(r.signal)?,
            epoch: r.epoch,
            awaited: r.awaited,
            observed: r.observed,
            count: r.count,
        })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FaultKind::InvalidArgument => {
                write!(
                    f,
                    "{} on rank {}: invalid arguments (block {})",
                    self.collective.name(),
                    self.rank,
                    self.block
                )
            }
            FaultKind::Timeout if self.peer_missing => write!(
                f,
                "{} timed out on rank {} (block {}): rank {} never joined the call (epoch {})",
                self.collective.name(),
                self.rank,
                self.block,
                self.peer,
                self.epoch
            ),
            FaultKind::Timeout => write!(
                f,
                "{} timed out on rank {} (block {}) waiting for {} from rank {}: flag {} awaited, {} seen (epoch {})",
                self.collective.name(),
                self.rank,
                self.block,
                self.signal.describe(),
                self.peer,
                self.awaited,
                self.observed,
                self.epoch
            ),
        }
    }
}
