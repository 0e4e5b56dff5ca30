//! Every rank's calls captured into **one** CUDA graph: what eight GPUs launching at once look
//! like on the virtual node. Rank 0 forks from an origin stream to every rank's stream with an
//! event, each rank captures its calls on its own stream from its own thread, and rank 0 joins
//! every stream back before it ends the capture and times the replays. Timing each rank's own
//! graph instead mostly measures the GPU starting the ranks' launches one after another.

use cudarc::driver::{CudaEvent, CudaStream, sys};
use std::sync::{Arc, Barrier, Mutex};

/// The meeting point of one process's rank threads for one-graph captures (virtual node or
/// several GPUs of one process; never across processes).
pub struct OneGraph {
    barrier: Barrier,
    origin: Arc<CudaStream>,
    fork: Mutex<Option<CudaEvent>>,
    joins: Mutex<Vec<Option<CudaEvent>>>,
    failure: Mutex<Option<String>>,
    per_call_ms: Mutex<f64>,
}

impl std::fmt::Debug for OneGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneGraph").finish_non_exhaustive()
    }
}

/// Stops on a capture error so a failed step reaches every rank, not only the one that saw it.
fn note(failure: &Mutex<Option<String>>, what: &str, e: impl std::fmt::Display) {
    let mut f = failure.lock().unwrap_or_else(|p| p.into_inner());
    f.get_or_insert_with(|| format!("{what}: {e}"));
}

impl OneGraph {
    /// A meeting point for `world` rank threads; captures start on `origin` (a stream of the GPU
    /// of rank 0).
    pub fn new(world: u32, origin: Arc<CudaStream>) -> Self {
        Self {
            barrier: Barrier::new(world as usize),
            origin,
            fork: Mutex::new(None),
            joins: Mutex::new((0..world).map(|_| None).collect()),
            failure: Mutex::new(None),
            per_call_ms: Mutex::new(0.0),
        }
    }

    /// Called by every rank thread at once: captures `enqueue` (which queues `calls` calls on
    /// `stream`) of every rank into one graph, replays it `replays` times (after one untimed
    /// replay) and returns the median milliseconds per call of a replay, the same on every rank.
    pub fn time(
        &self,
        rank: u32,
        stream: &Arc<CudaStream>,
        calls: u32,
        replays: u32,
        enqueue: impl FnOnce() -> purlin::Result<()>,
    ) -> Result<f64, String> {
        // 1. Rank 0 starts the capture and records the fork.
        if rank == 0 {
            *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
            match self
                .origin
                .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
                .and_then(|_| self.origin.record_event(None))
            {
                Ok(e) => *self.fork.lock().unwrap_or_else(|p| p.into_inner()) = Some(e),
                Err(e) => note(&self.failure, "begin capture", e),
            }
        }
        self.barrier.wait();
        // 2. Every rank joins the capture through the fork, queues its calls and records its
        //    join. A rank whose step failed still records a join, so rank 0 can end the capture.
        if let Some(fork) = self.fork.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            if let Err(e) = stream.wait(fork) {
                note(&self.failure, "join the capture", e);
            } else {
                if let Err(e) = enqueue() {
                    note(&self.failure, &format!("rank {rank}'s calls"), e);
                }
                match stream.record_event(None) {
                    Ok(e) => {
                        self.joins.lock().unwrap_or_else(|p| p.into_inner())[rank as usize] =
                            Some(e)
                    }
                    Err(e) => note(&self.failure, "record the join", e),
                }
            }
        }
        self.barrier.wait();
        // 3. Rank 0 joins every stream, ends the capture and times the replays.
        if rank == 0 {
            let joins: Vec<CudaEvent> = self
                .joins
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter_mut()
                .filter_map(Option::take)
                .collect();
            self.fork.lock().unwrap_or_else(|p| p.into_inner()).take();
            for j in &joins {
                if let Err(e) = self.origin.wait(j) {
                    note(&self.failure, "join back", e);
                }
            }
            let graph = self.origin.end_capture(sys::CUgraphInstantiate_flags(0));
            let failed = self
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some();
            match graph {
                Ok(Some(graph)) if !failed => {
                    match super::run::time_ms(&self.origin, replays, |_| {
                        graph.launch().map_err(purlin::Error::from)
                    }) {
                        Ok(ms) => {
                            *self.per_call_ms.lock().unwrap_or_else(|p| p.into_inner()) =
                                ms / calls.max(1) as f64
                        }
                        Err(e) => note(&self.failure, "replay", e),
                    }
                }
                Ok(_) if failed => {}
                Ok(_) => note(&self.failure, "end capture", "no graph"),
                Err(e) => note(&self.failure, "end capture", e),
            }
        }
        self.barrier.wait();
        let result = match self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            Some(f) => Err(f),
            None => Ok(*self.per_call_ms.lock().unwrap_or_else(|p| p.into_inner())),
        };
        // Nobody reads the shared slots again before rank 0 resets them for the next step.
        self.barrier.wait();
        result
    }
}
