//! The fault record a block leaves in its rank's local state when a wait runs out of time (or
//! the arguments cannot be run), and its decoded form for the host.

use core::fmt;

wire_enum! {
    /// Which collective a fault happened in.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum CollectiveKind {
        /// AllReduce.
        AllReduce = 1 => "all_reduce",
        /// AllGather.
        AllGather = 2 => "all_gather",
        /// ReduceScatter.
        ReduceScatter = 3 => "reduce_scatter",
        /// AllToAll.
        AllToAll = 4 => "all_to_all",
        /// AllGatherV.
        AllGatherV = 5 => "all_gather_v",
        /// ReduceScatterV.
        ReduceScatterV = 6 => "reduce_scatter_v",
        /// AllToAllV.
        AllToAllV = 7 => "all_to_all_v",
    }

    /// The name nccl-tests and the original print (`all_reduce`, ...).
    pub const fn name(self) -> &'static str;
}

impl CollectiveKind {
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

wire_enum! {
    /// What a block was waiting for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum SignalKind {
        /// A peer's staged chunk (`signals[me][Data][peer]`).
        Data = 0 => "staged data",
        /// A peer's reduced shard (the AllReduce gather tail).
        Gather = 1 => "a reduced shard",
        /// A peer having drained a staging slot this rank wants to reuse (cyclic staging).
        Consumed = 2 => "a drained staging slot",
        /// A peer's arrival (posted once per call; only used to diagnose).
        Arrival = 3 => "its arrival",
        /// A latency packet from a peer.
        Packet = 4 => "latency packets",
        /// A peer's extent packet (the size agreement of AllToAllV).
        Extent = 5 => "its size",
        /// Nothing: the arguments could not be run.
        None = 6 => "nothing",
    }

    /// A short description.
    pub const fn describe(self) -> &'static str;
}

wire_enum! {
    /// Why a block left a collective early.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum FaultKind {
        /// A wait ran past `Context::timeout_ns`.
        Timeout = 1,
        /// The arguments cannot be run (see [`Refusal`] for why): the rank refused the call before
        /// touching any buffer.
        InvalidArgument = 2,
        /// A peer's call differs from this rank's in something every rank must agree on (see
        /// [`DigestField`]).
        DigestMismatch = 3,
        /// A peer faulted first; its abort record ended this rank's waits.
        PeerFaulted = 4,
    }
}

wire_enum! {
    /// Why a rank refused a call ([`FaultKind::InvalidArgument`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Refusal {
        /// No reason recorded.
        Unknown = 0 => "invalid arguments",
        /// World, rank, block index or block count out of range.
        Shape = 1 => "world, rank or block count out of range",
        /// More threads per block than the Atom's shared memory is laid out for.
        BlockThreads = 2 => "more threads per block than the Atom supports",
        /// A size that is not a whole number of elements (or zero-sized elements).
        Elements = 3 => "a size that is not a whole number of elements",
        /// V counts missing (null).
        CountsMissing = 4 => "no counts",
        /// A V count above the call's `max_count` (the value and its index are in the fault).
        CountAboveMax = 5 => "a count above max_count",
        /// A sum or product of sizes does not fit 64 bits.
        SizeOverflow = 6 => "sizes that overflow 64 bits",
        /// The input buffer is smaller than the counts describe.
        SourceTooSmall = 7 => "an input buffer smaller than the counts describe",
        /// The output buffer is smaller than the counts describe.
        DestinationTooSmall = 8 => "an output buffer smaller than the counts describe",
        /// Staging cannot hold one 16-byte unit per region.
        StagingTooSmall = 9 => "staging too small for the call",
        /// Input and output overlap other than the way the collective allows (AllReduce: the same
        /// buffer; AllGather(V): the input is this rank's part of the output; ReduceScatter(V): the
        /// output is this rank's part of the input; AllToAll(V): not at all).
        Overlap = 10 => "input and output overlap in a way this collective does not allow",
        /// A lean launch (SNAC's scratch only, no Atom shared memory), or a latency-only kernel,
        /// for a call whose path needs the Atom's shared memory; or less shared memory than
        /// SNAC's scratch.
        SharedMemory = 11 => "the launch gave less shared memory than the call's path needs",
        /// Symmetric-buffer tables that do not hold this rank's own `src` / `dst` at its rank, or
        /// an identity without tables (see [`SnacArgs::buffers`](super::SnacArgs::buffers)).
        SymmetricBuffers = 12 => "symmetric-buffer tables that do not name this rank's own buffers",
    }

    /// The reason with this value (`Unknown` for others).
    pub const fn from_u32(v: u32) -> Self else Unknown;

    /// A short description.
    pub const fn describe(self) -> &'static str;
}

wire_enum! {
    /// What two ranks' calls disagree on ([`FaultKind::DigestMismatch`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum DigestField {
        /// Nothing (not a digest fault).
        None = 0 => "nothing",
        /// The collective.
        Collective = 1 => "collective",
        /// The element type (reductions) or element size (copy V collectives).
        Element = 2 => "element type",
        /// The reduction operator.
        Operator = 3 => "operator",
        /// The reduction mode.
        Mode = 4 => "reduction mode",
        /// The AllReduce algorithm.
        Algorithm = 5 => "algorithm",
        /// The number of blocks.
        Blocks = 6 => "block count",
        /// The size in bytes (fixed-size collectives) or `max_count` (V collectives).
        Size = 7 => "size",
        /// The plan (chunk size, producer blocks, thresholds).
        Plan = 8 => "plan",
        /// The workspace layout (staging half, latency window, world).
        Workspace = 9 => "workspace layout",
        /// The V counts: AllGatherV and ReduceScatterV counts differ between the ranks, or
        /// (AllToAllV) what the peer sends here differs from what this rank expects from it.
        Counts = 10 => "counts",
        /// The symmetric buffers of a fixed-size call: one rank passed symmetric buffers and the
        /// other ordinary ones, or other symmetric buffers.
        Buffers = 11 => "symmetric buffers",
    }

    /// The field with this value (`None` for others).
    pub const fn from_u32(v: u32) -> Self else None;

    /// The field's name.
    pub const fn name(self) -> &'static str;
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
    /// The last value seen (a refusal: the offending value; a digest fault: the peer's
    /// value; a peer's fault: the time it faulted, ns of `%globaltimer`).
    pub observed: u64,
    /// What else the kind needs: a refusal's [`Refusal`] (low 32 bits) and the index of the
    /// offending count (high 32); a digest fault's [`DigestField`]; a peer's fault, that
    /// fault's cause ([`Fault::cause_code`]).
    pub detail: u64,
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
            detail: u64_at(56),
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
    /// The last value seen (see [`FaultRecord::observed`]).
    pub observed: u64,
    /// How many blocks of this rank faulted.
    pub count: u32,
    /// The kind's details (see [`FaultRecord::detail`]).
    pub detail: u64,
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
            detail: r.detail,
        })
    }

    /// Why the call was refused ([`FaultKind::InvalidArgument`]).
    pub const fn refusal(&self) -> Refusal {
        Refusal::from_u32(self.detail as u32)
    }

    /// The index of the offending count of a refusal (V collectives).
    pub const fn refused_index(&self) -> u32 {
        (self.detail >> 32) as u32
    }

    /// The field two ranks disagree on ([`FaultKind::DigestMismatch`]).
    pub const fn field(&self) -> DigestField {
        DigestField::from_u32(self.detail as u32)
    }

    /// This fault packed into the `u64` a rank's abort record carries to its peers: kind,
    /// collective, peer, signal, whether the peer was missing, and the refusal or field.
    pub const fn cause_code(&self) -> u64 {
        Self::encode_cause(
            self.kind,
            self.collective,
            self.peer,
            self.signal,
            self.peer_missing,
            self.detail,
        )
    }

    /// The [`cause_code`](Self::cause_code) of a fault with these fields (what a faulting block
    /// writes before any `Fault` value exists); [`from_cause`](Self::from_cause) reads it back.
    pub const fn encode_cause(
        kind: FaultKind,
        collective: CollectiveKind,
        peer: u32,
        signal: SignalKind,
        peer_missing: bool,
        detail: u64,
    ) -> u64 {
        (kind as u64)
            | ((collective as u64) << 8)
            | ((peer as u64 & 0xff) << 16)
            | ((signal as u64) << 24)
            | ((peer_missing as u64) << 32)
            | ((detail & 0xff) << 40)
    }

    /// The first fault of rank `rank`, unpacked from its [`cause_code`](Self::cause_code)
    /// (`None` for a code that is no fault).
    pub const fn from_cause(rank: u32, code: u64, time: u64) -> Option<Self> {
        let Some(kind) = FaultKind::from_u32((code & 0xff) as u32) else {
            return None;
        };
        let Some(collective) = CollectiveKind::from_u32(((code >> 8) & 0xff) as u32) else {
            return None;
        };
        let Some(signal) = SignalKind::from_u32(((code >> 24) & 0xff) as u32) else {
            return None;
        };
        Some(Self {
            kind,
            collective,
            rank,
            peer: ((code >> 16) & 0xff) as u32,
            peer_missing: (code >> 32) & 1 == 1,
            block: 0,
            signal,
            epoch: 0,
            awaited: 0,
            observed: time,
            count: 1,
            detail: (code >> 40) & 0xff,
        })
    }

    /// For a [`FaultKind::PeerFaulted`] fault: the peer's first fault.
    pub const fn first(&self) -> Option<Self> {
        match self.kind {
            FaultKind::PeerFaulted => Self::from_cause(self.peer, self.detail, self.observed),
            _ => None,
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.collective.name();
        match self.kind {
            FaultKind::InvalidArgument => {
                write!(
                    f,
                    "{name} refused on rank {}: {}",
                    self.rank,
                    self.refusal().describe()
                )?;
                match self.refusal() {
                    Refusal::CountAboveMax
                    | Refusal::SourceTooSmall
                    | Refusal::DestinationTooSmall => write!(
                        f,
                        " (count {} at index {}: {} bytes needed)",
                        self.observed,
                        self.refused_index(),
                        self.awaited
                    ),
                    Refusal::BlockThreads => write!(f, " ({} threads)", self.observed),
                    _ => Ok(()),
                }
            }
            FaultKind::Timeout if self.peer_missing => write!(
                f,
                "{name} timed out on rank {} (block {}): rank {} never launched the call (epoch {})",
                self.rank, self.block, self.peer, self.epoch
            ),
            FaultKind::Timeout => write!(
                f,
                "{name} timed out on rank {} (block {}) waiting for {} from rank {}: flag {} awaited, {} seen (epoch {})",
                self.rank,
                self.block,
                self.signal.describe(),
                self.peer,
                self.awaited,
                self.observed,
                self.epoch
            ),
            FaultKind::DigestMismatch => write!(
                f,
                "{name} on rank {} and rank {} disagree on the {}: {} here, {} there (epoch {})",
                self.rank,
                self.peer,
                self.field().name(),
                self.awaited,
                self.observed,
                self.epoch
            ),
            FaultKind::PeerFaulted => match self.first() {
                Some(first) => write!(
                    f,
                    "{name} on rank {} stopped: rank {} faulted first ({})",
                    self.rank,
                    self.peer,
                    first.cause()
                ),
                None => write!(
                    f,
                    "{name} on rank {} stopped: rank {} faulted first",
                    self.rank, self.peer
                ),
            },
        }
    }
}

impl Fault {
    /// A short cause, as a peer learns it from the abort record.
    pub fn cause(&self) -> impl fmt::Display + '_ {
        struct Cause<'a>(&'a Fault);
        impl fmt::Display for Cause<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let c = self.0;
                match c.kind {
                    FaultKind::InvalidArgument => {
                        write!(f, "it refused the call: {}", c.refusal().describe())
                    }
                    FaultKind::Timeout if c.peer_missing => {
                        write!(f, "timed out: rank {} never launched the call", c.peer)
                    }
                    FaultKind::Timeout => write!(
                        f,
                        "timed out waiting for {} from rank {}",
                        c.signal.describe(),
                        c.peer
                    ),
                    FaultKind::DigestMismatch => write!(
                        f,
                        "its call and rank {}'s disagree on the {}",
                        c.peer,
                        c.field().name()
                    ),
                    FaultKind::PeerFaulted => write!(f, "stopped by rank {}", c.peer),
                }
            }
        }
        Cause(self)
    }
}
