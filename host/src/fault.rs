//! The fault record a kernel leaves in the local state
//! ([`LocalState::FAULT`](purlin_device::context::LocalState::FAULT)) when a bounded wait runs
//! out (or it refuses its arguments), and its decoding into the host's [`Error`]. The format
//! is SNAC's ([`purlin_device::snac::FaultRecord`]); this module only maps it.
//!
//! ```
//! use purlin::fault::{decode_fault_record, fault_error};
//! let mut bytes = [0u8; 64];
//! bytes[0] = 1; // one block faulted
//! bytes[4] = 1; // FaultKind::Timeout
//! bytes[8] = 2; // CollectiveKind::AllGather
//! bytes[12] = 1; // on rank 1
//! bytes[16] = 3; // waiting for rank 3
//! bytes[32] = 9; // epoch 9
//! let fault = decode_fault_record(&bytes).unwrap();
//! assert!(matches!(
//!     fault_error(&fault),
//!     purlin::Error::Timeout { collective: "all_gather", rank: 1, peer: 3, epoch: 9, .. }
//! ));
//! assert!(decode_fault_record(&[0; 64]).is_none());
//! ```

use crate::error::Error;
use purlin_device::context::LocalState;

pub use purlin_device::collective::{CollectiveKind, Fault};
pub use purlin_device::snac::{FaultKind, FaultRecord, SignalKind};

/// Bytes of the fault record.
pub const FAULT_BYTES: usize = LocalState::FAULT_BYTES;

/// Decodes a fault record; `None` when no block has faulted.
///
/// ```
/// assert!(purlin::fault::decode_fault_record(&[0; 64]).is_none());
/// ```
pub fn decode_fault_record(bytes: &[u8; FAULT_BYTES]) -> Option<Fault> {
    Fault::decode(bytes)
}

/// The error the host returns for a fault: [`Error::Timeout`] for a wait that ran out,
/// [`Error::Refused`] for arguments a kernel refused, [`Error::Mismatch`] for calls that
/// differ between ranks and [`Error::PeerFaulted`] when another rank faulted first.
///
/// ```
/// use purlin::fault::{Fault, FaultKind, CollectiveKind, SignalKind, fault_error};
/// let f = Fault {
///     kind: FaultKind::InvalidArgument, collective: CollectiveKind::AllToAll, rank: 0, peer: 0,
///     peer_missing: false, block: 3, signal: SignalKind::None, epoch: 0, awaited: 0, observed: 0,
///     count: 1, detail: 0,
/// };
/// assert!(matches!(fault_error(&f), purlin::Error::Refused { collective: "all_to_all", .. }));
/// ```
pub fn fault_error(fault: &Fault) -> Error {
    let collective = fault.collective.name();
    match fault.kind {
        FaultKind::Timeout => Error::Timeout {
            collective,
            rank: fault.rank,
            peer: fault.peer,
            epoch: fault.epoch,
            peer_missing: fault.peer_missing,
            waiting_for: fault.signal.describe(),
        },
        FaultKind::InvalidArgument => Error::Refused {
            collective,
            rank: fault.rank,
            reason: fault.to_string(),
        },
        FaultKind::DigestMismatch => Error::Mismatch {
            collective,
            rank: fault.rank,
            peer: fault.peer,
            field: fault.field().name(),
            mine: fault.awaited,
            theirs: fault.observed,
        },
        FaultKind::PeerFaulted => Error::PeerFaulted {
            collective,
            rank: fault.rank,
            first: fault.peer,
            cause: fault
                .first()
                .map_or_else(|| "unknown".into(), |first| first.cause().to_string()),
        },
    }
}
