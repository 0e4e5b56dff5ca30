//! Where one call's time went, per rank: the times a traced call
//! ([`Options::trace`](crate::collective::Options::trace)) passed each phase on this rank, read
//! back with [`Context::last_call_trace`](crate::Context::last_call_trace). The clock is the
//! GPU's global timer (ns), shared by every SM of one GPU, so the traces of ranks on one GPU
//! (the virtual node) line up with each other.
//!
//! ```
//! use purlin::trace::{CallTrace, Point};
//! // Entry, Loaded, Counted, Checked, Begun, Announced, Sent, Received, Moved, Digests, End
//! // (a fixed-size call: no V counts loaded nor counted).
//! let t = CallTrace::from_times([1_000, 0, 0, 1_200, 1_400, 1_500, 0, 0, 2_000, 2_600, 2_700]);
//! assert_eq!(t.since_entry_us(Point::Digests), Some(1.6));
//! assert_eq!(t.since_entry_us(Point::Sent), None); // not passed
//! assert_eq!(t.since_entry_us(Point::Counted), None);
//! assert_eq!(t.at(Point::End), Some(2_700));
//! ```

pub use purlin_device::snac::trace::{POINTS, Point};

/// The times (ns of the GPU's global timer) at which one rank's last traced call passed each
/// [`Point`]; 0 for a point it did not pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallTrace {
    times: [u64; POINTS],
}

impl CallTrace {
    /// A trace of these times, in [`Point`] order.
    pub const fn from_times(times: [u64; POINTS]) -> Self {
        Self { times }
    }

    /// The time `point` was passed, if it was.
    pub fn at(&self, point: Point) -> Option<u64> {
        Some(self.times[point as usize]).filter(|&t| t != 0)
    }

    /// Microseconds from [`Point::Entry`] to `point`, if the call passed both.
    pub fn since_entry_us(&self, point: Point) -> Option<f64> {
        let (entry, at) = (self.at(Point::Entry)?, self.at(point)?);
        Some(at.wrapping_sub(entry) as i64 as f64 / 1e3)
    }

    /// Every point's time, in [`Point`] order.
    pub const fn times(&self) -> &[u64; POINTS] {
        &self.times
    }
}
