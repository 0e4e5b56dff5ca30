//! The handle `purlin.initialize` returns: one rank's [`Context`] (its workspace mapped in every
//! peer), the GPU, the stream the context currently launches on, and the V counts' slots.
//! The Python API names the stream in every call, so each call first points the context at it
//! ([`Context::set_stream`]); nothing else is per call.

use crate::bootstrap::PyBootstrap;
use crate::counts::CountsArena;
use crate::error::{BindingError, Result};
use cudarc::driver::{CudaStream, sys};
use purlin::ptx::Arch;
use purlin::{Context, Gpu};
use pyo3::prelude::*;
use std::sync::{Arc, Mutex};

/// One rank's communicator, made by `purlin.initialize` and released by `purlin.finalize`.
///
/// Pass it to every collective of the rank. It is not picklable and belongs to the process that
/// made it. `purlin.finalize` is collective: every rank calls it (a handle dropped without it
/// frees its memory without waiting for the other ranks).
#[pyclass(frozen, module = "purlin._native", name = "ContextHandle")]
pub struct ContextHandle {
    rank: u32,
    world: u32,
    ordinal: usize,
    arch: Arch,
    live: Mutex<Option<Live>>,
}

/// What a handle holds until it is finalized.
pub struct Live {
    /// The communicator.
    pub ctx: Context,
    /// Its GPU.
    pub gpu: Arc<Gpu>,
    /// The raw stream `ctx` launches on now.
    stream: u64,
    /// Slots for the V collectives' counts.
    pub counts: CountsArena,
    /// The bootstrap the workspace exchanges through.
    bootstrap: Arc<PyBootstrap>,
}

impl ContextHandle {
    /// A handle over a made context.
    pub fn new(
        ctx: Context,
        gpu: Arc<Gpu>,
        stream: u64,
        counts: CountsArena,
        bootstrap: Arc<PyBootstrap>,
    ) -> Self {
        Self {
            rank: ctx.rank(),
            world: ctx.world(),
            ordinal: gpu.ordinal(),
            arch: gpu.arch(),
            live: Mutex::new(Some(Live {
                ctx,
                gpu,
                stream,
                counts,
                bootstrap,
            })),
        }
    }

    /// A handle with no communicator behind it, like a finalized one: calls check their
    /// arguments against its rank, world and device, then refuse to run. Lets the argument
    /// checks be tested on machines without a GPU.
    pub fn unbound(rank: u32, world: u32, ordinal: usize, arch: Arch) -> Self {
        Self {
            rank,
            world,
            ordinal,
            arch,
            live: Mutex::new(None),
        }
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Ranks in the communicator.
    pub fn world(&self) -> u32 {
        self.world
    }

    /// The CUDA device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Runs `f` on the live state with the context pointed at `stream`; a `RuntimeError` once
    /// the handle is finalized.
    pub fn with_live<T>(&self, stream: u64, f: impl FnOnce(&mut Live) -> Result<T>) -> Result<T> {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let Some(live) = live.as_mut() else {
            return Err(finalized());
        };
        live.use_stream(stream)?;
        f(live)
    }

    /// Takes the live state out (finalize); `None` if it was taken before.
    pub fn take(&self) -> Option<Live> {
        self.live.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// The error of a call on a finalized handle.
pub fn finalized() -> BindingError {
    BindingError::Runtime("the handle was finalized: make a new one with purlin.initialize".into())
}

/// A raw `CUstream` from the int Python passes.
pub fn raw_stream(stream: u64) -> sys::CUstream {
    stream as usize as sys::CUstream
}

impl Live {
    /// The raw stream launches go to now.
    pub fn stream(&self) -> sys::CUstream {
        raw_stream(self.stream)
    }

    /// Points the context at `stream` unless it already is. The stream must belong to the
    /// context's device (torch's streams use the primary context, as Purlin does).
    pub fn use_stream(&mut self, stream: u64) -> Result<()> {
        if stream == self.stream {
            return Ok(());
        }
        let wrapped = wrap_stream(&self.gpu, stream)?;
        self.ctx.set_stream(&wrapped)?;
        self.stream = stream;
        Ok(())
    }

    /// A live, aligned device address to stand in, with zero bytes, for an empty tensor.
    pub fn counts_stand_in(&self) -> u64 {
        self.counts.base()
    }

    /// The bootstrap's first Python exception, if an exchange raised one.
    pub fn bootstrap_failure(&self) -> Option<PyErr> {
        self.bootstrap.take_failure()
    }

    /// Tears down without the other ranks (the handle was dropped unfinalized): waits for the
    /// device, makes exchanges fail at once, and frees.
    fn abandon(mut self) {
        self.bootstrap.detach();
        if let Err(e) = self.gpu.context().synchronize() {
            tracing::warn!(%e, "waiting for the device before an unfinalized teardown failed");
        }
        // The last stream a call named may be gone by now: tear down on the legacy stream
        // (idle: the device was synchronised above).
        let legacy = self.gpu.context().default_stream();
        if let Err(e) = self.ctx.set_stream(&legacy) {
            tracing::warn!(%e, "switching to the legacy stream for teardown failed");
        }
        drop(self);
    }

    /// Splits the live state for finalize: the context, then the rest (dropped after it).
    pub fn into_parts(self) -> (Context, CountsArena, Arc<PyBootstrap>) {
        (self.ctx, self.counts, self.bootstrap)
    }
}

/// Wraps the raw stream `stream` of `gpu`'s context, after checking that it is one.
pub fn wrap_stream(gpu: &Arc<Gpu>, stream: u64) -> Result<Arc<CudaStream>> {
    gpu.context().bind_to_thread()?;
    let raw = raw_stream(stream);
    let mut owner: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: a valid out-pointer. `raw` is what the caller passed as a cudaStream_t; the API's
    // contract (as the original's) is that it names a live stream, and the special handles
    // (0: legacy, 2: per-thread) resolve to the current context, bound above.
    let status = unsafe { sys::cuStreamGetCtx(raw, &mut owner) };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(BindingError::Value(format!(
            "stream_ptr {stream:#x} is not a CUDA stream the driver knows ({status:?}): pass \
             torch.cuda.current_stream(device).cuda_stream or another live stream's cuda_stream"
        )));
    }
    if owner != gpu.context().cu_ctx() {
        return Err(BindingError::Value(format!(
            "stream_ptr {stream:#x} belongs to another device or CUDA context than the handle's \
             (cuda:{}): pass a stream of the handle's device",
            gpu.ordinal()
        )));
    }
    // SAFETY: `raw` is a live stream of this context (checked above); the caller keeps it alive
    // while calls are queued on it (the API's contract), and the handle re-points the context
    // at the stream of every call, and at the legacy stream before an unfinalized teardown.
    Ok(unsafe { gpu.context().wrap_borrowed_stream(raw) })
}

impl Drop for ContextHandle {
    fn drop(&mut self) {
        let live = self
            .live
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(live) = live {
            tracing::warn!(
                rank = self.rank,
                "a Purlin handle was dropped without purlin.finalize"
            );
            live.abandon();
        }
    }
}

#[pymethods]
impl ContextHandle {
    /// This process's rank in the group the handle was made over.
    #[getter(rank)]
    fn py_rank(&self) -> u32 {
        self.rank
    }

    /// Ranks in the group.
    #[getter(world)]
    fn py_world(&self) -> u32 {
        self.world
    }

    /// The CUDA device ordinal the handle runs on.
    #[getter(device)]
    fn py_device(&self) -> usize {
        self.ordinal
    }

    /// The architecture of the loaded kernels, as the original's `ARCH` value (700, 800, 900,
    /// 1000).
    #[getter(arch)]
    fn py_arch(&self) -> u32 {
        self.arch.compute_capability() * 10
    }

    /// Whether `purlin.finalize` has released the handle.
    #[getter(finalized)]
    fn py_finalized(&self) -> bool {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    fn __repr__(&self) -> String {
        format!(
            "<purlin.ContextHandle rank {} of {} on cuda:{} ({}){}>",
            self.rank,
            self.world,
            self.ordinal,
            self.arch,
            if self.py_finalized() {
                ", finalized"
            } else {
                ""
            }
        )
    }
}
