//! The bindings' error type and how each error becomes a Python exception: bad arguments are
//! `ValueError` (or `TypeError` for a wrong kind of object or dtype), a rank that never comes is
//! `TimeoutError`, everything else `RuntimeError`. Every message says what to change.

use pyo3::PyErr;
use pyo3::exceptions::{PyRuntimeError, PyTimeoutError, PyTypeError, PyValueError};

/// Everything a binding call can fail with, as a value until it reaches Python.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    /// An argument has the right type but a value Purlin cannot take.
    #[error("{0}")]
    Value(String),
    /// An argument is not the kind of object (or dtype) the call takes.
    #[error("{0}")]
    Type(String),
    /// A wait for another rank ran out of time.
    #[error("{0}")]
    Timeout(String),
    /// The call was well-formed, but the library or the device failed it.
    #[error("{0}")]
    Runtime(String),
    /// An error of the Rust host crate.
    #[error(transparent)]
    Purlin(#[from] purlin::Error),
    /// A Python exception, passed through as it is (from a bootstrap callback, say).
    #[error("{0}")]
    Python(PyErr),
}

/// `Result` with [`BindingError`].
pub type Result<T, E = BindingError> = std::result::Result<T, E>;

impl From<PyErr> for BindingError {
    fn from(e: PyErr) -> Self {
        Self::Python(e)
    }
}

impl From<cudarc::driver::DriverError> for BindingError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        Self::Purlin(e.into())
    }
}

impl From<BindingError> for PyErr {
    fn from(e: BindingError) -> Self {
        use purlin::Error as E;
        match e {
            BindingError::Value(m) => PyValueError::new_err(m),
            BindingError::Type(m) => PyTypeError::new_err(m),
            BindingError::Timeout(m) => PyTimeoutError::new_err(m),
            BindingError::Runtime(m) => PyRuntimeError::new_err(m),
            BindingError::Python(e) => e,
            BindingError::Purlin(e) => {
                let message = e.to_string();
                match e {
                    E::Timeout { .. } => PyTimeoutError::new_err(message),
                    // A peer whose wait ran out stopped this rank: the same timeout, seen
                    // second-hand (the message names the rank that never came).
                    E::PeerFaulted { ref cause, .. } if cause.contains("timed out") => {
                        PyTimeoutError::new_err(message)
                    }
                    // The ranks' calls differ, or a rank refused its arguments on the device.
                    E::Mismatch { .. } | E::Refused { .. } => PyValueError::new_err(message),
                    E::NullPointer { .. }
                    | E::Misaligned { .. }
                    | E::PartialElement { .. }
                    | E::RankOutOfRange { .. }
                    | E::WorldSize { .. }
                    | E::WorldMismatch { .. }
                    | E::BufferTooSmall { .. }
                    | E::InvalidRequirements { .. }
                    | E::InvalidArgument { .. }
                    | E::WrongDevice { .. }
                    | E::NoDevice { .. }
                    | E::ArchUnsupported { .. } => PyValueError::new_err(message),
                    _ => PyRuntimeError::new_err(message),
                }
            }
        }
    }
}

/// A `ValueError`-to-be.
pub fn value(message: impl Into<String>) -> BindingError {
    BindingError::Value(message.into())
}

/// A `TypeError`-to-be.
pub fn type_error(message: impl Into<String>) -> BindingError {
    BindingError::Type(message.into())
}
