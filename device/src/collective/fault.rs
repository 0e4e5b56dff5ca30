//! A collective's fault as the host reads it: the fault record a block left in its rank's local
//! state (`snac::FaultRecord`), decoded and named.

use super::CollectiveKind;
use crate::snac::{CallKind, Cause, DigestField, FaultKind, FaultRecord, Refusal, SignalKind};
use core::fmt;

/// A decoded fault: which collective, on which rank and block, waiting for whom and what.
///
/// ```
/// use purlin_device::collective::{CollectiveKind, Fault};
/// use purlin_device::snac::{FaultKind, SignalKind};
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

    /// This fault packed into the `u64` a rank's abort record carries to its peers (a
    /// [`Cause`]).
    pub const fn cause_code(&self) -> u64 {
        Cause {
            kind: self.kind,
            call: CallKind(self.collective as u8),
            peer: self.peer,
            signal: self.signal,
            peer_missing: self.peer_missing,
            detail: self.detail,
        }
        .encode()
    }

    /// The first fault of rank `rank`, unpacked from its [`cause_code`](Self::cause_code)
    /// (`None` for a code that is no fault of a collective).
    pub const fn from_cause(rank: u32, code: u64, time: u64) -> Option<Self> {
        let Some(c) = Cause::decode(code) else {
            return None;
        };
        let Some(collective) = CollectiveKind::from_u32(c.call.0 as u32) else {
            return None;
        };
        Some(Self {
            kind: c.kind,
            collective,
            rank,
            peer: c.peer,
            peer_missing: c.peer_missing,
            block: 0,
            signal: c.signal,
            epoch: 0,
            awaited: 0,
            observed: time,
            count: 1,
            detail: c.detail,
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
                    Refusal::SelfCounts => write!(
                        f,
                        " ({} elements sent, {} received)",
                        self.observed, self.awaited
                    ),
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
        struct Short<'a>(&'a Fault);
        impl fmt::Display for Short<'_> {
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
        Short(self)
    }
}
