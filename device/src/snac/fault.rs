//! The fault record a block leaves in its rank's local state when a wait runs out of time (or
//! the arguments cannot be run), and the cause a faulting rank posts to its peers. The decoded
//! form, which names the collective, is `collective::Fault`.

/// What a call runs, as the layer above SNAC names it: an opaque code that SNAC writes into
/// fault records, abort records and the call digest without reading it (the collectives' codes
/// are `collective::CollectiveKind`'s).
///
/// ```
/// use purlin_device::snac::CallKind;
/// assert_ne!(CallKind(1), CallKind(2));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallKind(pub u8);

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
        /// The input buffer is smaller than the call reads (its size, or its V counts).
        SourceTooSmall = 7 => "an input buffer smaller than the call reads",
        /// The output buffer is smaller than the call writes (its size, or its V counts).
        DestinationTooSmall = 8 => "an output buffer smaller than the call writes",
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
        /// AllToAllV counts by which this rank sends itself a different number of elements than
        /// it receives from itself (the fault holds both).
        SelfCounts = 13 => "AllToAllV counts that send this rank a different number of elements than it receives from itself",
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
        /// The buffers: one rank passed symmetric buffers and the other ordinary ones, or other
        /// symmetric buffers, or one rank exchanges its ordinary buffers' addresses (its peers
        /// reach them) and the other does not (values 1 and 0).
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
    /// The call's [`CallKind`] code.
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
    /// fault's cause (a [`Cause`] code).
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

/// A fault as a rank's abort record carries it to its peers, packed in one `u64`: kind, call,
/// peer, signal, whether the peer was missing, and the low byte of the refusal or field.
///
/// ```
/// use purlin_device::snac::{CallKind, Cause, FaultKind, SignalKind};
/// let c = Cause { kind: FaultKind::Timeout, call: CallKind(2), peer: 3, signal: SignalKind::Data, peer_missing: true, detail: 0 };
/// assert_eq!(Cause::decode(c.encode()), Some(c));
/// assert_eq!(Cause::decode(0), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cause {
    /// Why.
    pub kind: FaultKind,
    /// What the call ran.
    pub call: CallKind,
    /// The rank waited for (its low byte), or the one that never joined.
    pub peer: u32,
    /// What was awaited.
    pub signal: SignalKind,
    /// True when `peer` never joined the call.
    pub peer_missing: bool,
    /// The low byte of the fault's detail (a refusal or digest field).
    pub detail: u64,
}

impl Cause {
    /// The packed code (never 0: every fault kind is nonzero).
    pub const fn encode(&self) -> u64 {
        (self.kind as u64)
            | ((self.call.0 as u64) << 8)
            | ((self.peer as u64 & 0xff) << 16)
            | ((self.signal as u64) << 24)
            | ((self.peer_missing as u64) << 32)
            | ((self.detail & 0xff) << 40)
    }

    /// The cause packed in `code` (`None` for a code that is no fault).
    pub const fn decode(code: u64) -> Option<Self> {
        let Some(kind) = FaultKind::from_u32((code & 0xff) as u32) else {
            return None;
        };
        let Some(signal) = SignalKind::from_u32(((code >> 24) & 0xff) as u32) else {
            return None;
        };
        Some(Self {
            kind,
            call: CallKind(((code >> 8) & 0xff) as u8),
            peer: ((code >> 16) & 0xff) as u32,
            signal,
            peer_missing: (code >> 32) & 1 == 1,
            detail: (code >> 40) & 0xff,
        })
    }
}
