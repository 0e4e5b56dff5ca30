//! A [`Bootstrap`] over a Python callable: `exchange(data: bytes) -> list[bytes]` returns every
//! rank's `data` in rank order. `purlin.initialize` builds the callable over the
//! `torch.distributed` group (its key-value store, so every backend works, gloo included, and
//! a rank that never comes is named in a `TimeoutError`). The workspace uses it a few times at
//! set-up and once (a barrier) at teardown; nothing on the data path goes through it.

use purlin::bootstrap::Bootstrap;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Ranks exchanging bytes through a Python callable.
pub struct PyBootstrap {
    rank: u32,
    world: u32,
    same_process: bool,
    exchange: Py<PyAny>,
    /// The first Python exception the callable raised, handed back to Python as it is (a
    /// `TimeoutError` naming the missing ranks stays one).
    failure: Mutex<Option<PyErr>>,
    /// Set when the handle is dropped without `finalize`: exchanges then fail at once instead of
    /// waiting for peers that are not tearing down.
    detached: AtomicBool,
}

impl fmt::Debug for PyBootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PyBootstrap")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("same_process", &self.same_process)
            .finish_non_exhaustive()
    }
}

impl PyBootstrap {
    /// Rank `rank` of `world` exchanging through `exchange`. `same_process` says that every rank
    /// lives in this process (threads: addresses are shared as they are); torch ranks are
    /// processes, so `initialize` passes `false` and buffers travel as CUDA IPC handles.
    pub fn new(rank: u32, world: u32, same_process: bool, exchange: Py<PyAny>) -> Self {
        Self {
            rank,
            world,
            same_process,
            exchange,
            failure: Mutex::new(None),
            detached: AtomicBool::new(false),
        }
    }

    /// The first exception the callable raised, if any (taken: asked once).
    pub fn take_failure(&self) -> Option<PyErr> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Makes every later exchange fail at once (see the field).
    pub fn detach(&self) {
        self.detached.store(true, Ordering::Release);
    }

    fn exchange(&self, py: Python<'_>, data: &[u8]) -> PyResult<Vec<Vec<u8>>> {
        let out = self.exchange.bind(py).call1((PyBytes::new(py, data),))?;
        let parts: Vec<Bound<'_, PyBytes>> = out.extract()?;
        Ok(parts.iter().map(|p| p.as_bytes().to_vec()).collect())
    }
}

impl Bootstrap for PyBootstrap {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn world(&self) -> u32 {
        self.world
    }

    fn same_process(&self) -> bool {
        self.same_process
    }

    fn all_gather(&self, data: &[u8]) -> purlin::Result<Vec<Vec<u8>>> {
        if self.detached.load(Ordering::Acquire) {
            return Err(purlin::Error::Bootstrap(
                "the handle was dropped without purlin.finalize: its teardown does not wait \
                 for the other ranks"
                    .into(),
            ));
        }
        Python::attach(|py| match self.exchange(py, data) {
            Ok(parts) if parts.len() == self.world as usize => Ok(parts),
            Ok(parts) => Err(purlin::Error::Bootstrap(format!(
                "the exchange returned {} records for {} ranks",
                parts.len(),
                self.world
            ))),
            Err(e) => {
                let message = e.to_string();
                self.failure
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
                Err(purlin::Error::Bootstrap(message))
            }
        })
    }
}
