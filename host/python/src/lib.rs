//! `purlin._native`: the native half of the Python package `purlin` (the original library's
//! Python API on torch, over the Rust host crate). The package's `__init__.py` holds what
//! needs torch.distributed (the group, the bootstrap exchange) and the enums; everything per
//! call is here: tensors are read through their Python attributes (no libtorch), checked, and
//! handed to [`purlin::collective`]'s raw functions on the caller's stream.
//!
//! Errors are values (`error::BindingError`) until they reach Python, where they become
//! `ValueError`, `TypeError`, `TimeoutError` or `RuntimeError`; nothing panics across the FFI.

#![warn(missing_docs)]

mod bootstrap;
mod collectives;
mod counts;
mod error;
mod handle;
mod tensor;

use crate::bootstrap::PyBootstrap;
use crate::counts::CountsArena;
use crate::error::{BindingError, Result, value};
use crate::handle::{ContextHandle, raw_stream, wrap_stream};
use cudarc::driver::result;
use purlin::memory::{DeviceAllocator, HostAllocator};
use purlin::ptx::Arch;
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin::{Context, Gpu};
use pyo3::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The architecture an `arch` argument names: `major * 10 + minor` (what the original's
/// quickstart passes, e.g. 90) or the original's `ARCH` codes (700, 800, 900, 1000); the newest
/// architecture Purlin has at or below it.
fn arch_of(arch: u32) -> Result<Arch> {
    let cc = if arch >= 700 { arch / 10 } else { arch };
    Arch::for_compute_capability(cc).ok_or_else(|| {
        value(format!(
            "arch {arch}: Purlin runs on compute capability 7.0 or newer; pass major * 10 + \
             minor of torch.cuda.get_device_capability(device) (90 for Hopper)"
        ))
    })
}

/// A positive, finite number of seconds.
fn seconds(what: &str, s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            value(format!(
                "{what} must be a positive number of seconds, not {s}"
            ))
        })
}

/// The error a failed collective set-up or teardown reports: the bootstrap's Python exception
/// (a `TimeoutError` naming the ranks that never came) when there was one.
fn prefer_bootstrap(bootstrap: &PyBootstrap, e: BindingError) -> PyErr {
    match bootstrap.take_failure() {
        Some(py) => py,
        None => e.into(),
    }
}

/// Makes this rank's handle (what `purlin.initialize` calls once it has the group's rank, world
/// and exchange): opens GPU `device` with the kernels of `arch`, allocates the workspace and
/// maps every peer's (CUDA IPC handles through `exchange`), and returns the handle. Collective:
/// every rank of the group calls it.
#[pyfunction]
#[pyo3(signature = (rank, world, device, arch, stream_ptr, exchange, *, kernel_timeout = 10.0))]
#[allow(clippy::too_many_arguments)]
fn create_context(
    py: Python<'_>,
    rank: u32,
    world: u32,
    device: usize,
    arch: u32,
    stream_ptr: &Bound<'_, PyAny>,
    exchange: Py<PyAny>,
    kernel_timeout: f64,
) -> PyResult<ContextHandle> {
    purlin::validate::check_world(world).map_err(BindingError::from)?;
    purlin::validate::check_rank(rank, world).map_err(BindingError::from)?;
    let arch = arch_of(arch)?;
    let kernel_timeout = seconds("kernel_timeout", kernel_timeout)?;
    let stream = tensor::stream_arg(stream_ptr)?;
    // Loading the kernels may JIT-compile them (seconds): let other Python threads run.
    let gpu = py
        .detach(|| Gpu::open_arch(device, arch))
        .map_err(BindingError::from)?;
    let wrapped = wrap_stream(&gpu, stream)?;
    // Everything that can fail locally comes before the first exchange, so a rank that fails
    // here is one the others' exchange names as missing.
    let counts = CountsArena::new(gpu.clone())?;
    let bootstrap = Arc::new(PyBootstrap::new(rank, world, false, exchange));
    let workspace = Workspace::with_shared(
        bootstrap.clone(),
        Arc::new(DeviceAllocator::new(gpu.clone())),
        WorkspaceRequirements::default(),
    )
    .map_err(|e| prefer_bootstrap(&bootstrap, e.into()))?;
    let mut ctx = Context::new(rank, world, workspace, &wrapped).map_err(BindingError::from)?;
    ctx.set_timeout(kernel_timeout);
    Ok(ContextHandle::new(ctx, gpu, stream, counts, bootstrap))
}

/// Waits for `stream` (with the GIL released).
fn sync_stream(py: Python<'_>, stream: u64) -> Result<()> {
    let raw = stream as usize;
    // SAFETY: `raw` names a stream the handle checked and still uses (the API's contract keeps
    // it alive while calls are queued on it).
    py.detach(move || unsafe { result::stream::synchronize(raw_stream(raw as u64)) })?;
    Ok(())
}

/// Releases the handle, collectively: waits for `stream_ptr`, reports a kernel that timed out
/// waiting for a peer (`TimeoutError`, naming it), then frees the workspace once every rank has
/// unmapped it. Every rank calls it; a second call does nothing. Graphs that captured calls on
/// the handle must not be replayed afterwards.
#[pyfunction]
#[pyo3(signature = (handle, stream_ptr))]
fn finalize(
    py: Python<'_>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let stream = tensor::stream_arg(stream_ptr)?;
    let Some(mut live) = handle.get().take() else {
        return Ok(());
    };
    // Every step runs, whatever failed before it; the first failure is raised.
    let pointed = live.use_stream(stream);
    let synced = sync_stream(py, raw_stream_of(&live));
    let fault = match live.ctx.ensure_usable() {
        Ok(()) => live.ctx.check_fault().map_err(BindingError::from),
        // Already reported (and poisoned): the teardown goes on.
        Err(_) => Ok(()),
    };
    let (ctx, counts, bootstrap) = live.into_parts();
    drop(counts);
    let released = ctx
        .finalize()
        .map_err(|e| prefer_bootstrap(&bootstrap, e.into()));
    pointed.and(synced).and(fault)?;
    released
}

fn raw_stream_of(live: &handle::Live) -> u64 {
    live.stream() as usize as u64
}

/// Waits for everything queued on `stream_ptr`, then raises `TimeoutError` (naming the rank it
/// waited for) if a collective of the handle gave up waiting for a peer; the handle then refuses
/// new work. Not capturable (it waits on the host): call it after a batch of calls or a graph
/// replay. An extension: the original has no such call.
#[pyfunction]
#[pyo3(signature = (handle, stream_ptr))]
fn synchronize(
    py: Python<'_>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let stream = tensor::stream_arg(stream_ptr)?;
    let h = handle.get();
    // The handle's lock is not held while the GIL is released.
    h.with_live(stream, |_| Ok(()))?;
    sync_stream(py, stream)?;
    h.with_live(stream, |live| Ok(live.ctx.check_fault()?))?;
    Ok(())
}

/// Microseconds the Rust call of `all_reduce_raw` takes on the host, averaged over `iters`
/// calls on already-read tensors (each call's stream work is waited for outside the timed
/// part): the baseline the Python call's overhead is measured against. Internal.
#[pyfunction]
#[pyo3(signature = (in_tensor, out_tensor, handle, stream_ptr, iters))]
fn _rust_all_reduce_host_us(
    py: Python<'_>,
    in_tensor: &Bound<'_, PyAny>,
    out_tensor: &Bound<'_, PyAny>,
    handle: &Bound<'_, ContextHandle>,
    stream_ptr: &Bound<'_, PyAny>,
    iters: u32,
) -> PyResult<f64> {
    let h = handle.get();
    let stream = tensor::stream_arg(stream_ptr)?;
    let src = tensor::read(in_tensor, "in_tensor", h.ordinal())?;
    let dst = tensor::read(out_tensor, "out_tensor", h.ordinal())?;
    let dtype = src.reducible("all_reduce")?;
    tensor::check_same_dtype(&src, &dst)?;
    if src.numel != dst.numel || src.numel == 0 || iters == 0 {
        return Err(value("need two non-empty tensors of one size and iters > 0").into());
    }
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let took = h.with_live(stream, |live| {
            let t0 = Instant::now();
            // SAFETY: as in `all_reduce` (live CUDA tensors of the handle's device).
            unsafe {
                purlin::collective::all_reduce_raw(
                    &live.ctx,
                    dtype,
                    purlin::ReduceOpKind::Sum,
                    dst.span(),
                    src.span(),
                    src.numel,
                    &Default::default(),
                )
            }?;
            Ok(t0.elapsed())
        })?;
        total += took;
        sync_stream(py, stream)?;
    }
    Ok(total.as_secs_f64() * 1e6 / iters as f64)
}

/// Builds a host-memory workspace over a Python `exchange` with every rank a thread of this
/// process, and returns every rank's staging address as this rank sees it: a CPU check of the
/// Python-callback bootstrap (the GPU path uses the same code with device memory). Internal.
#[pyfunction]
#[pyo3(signature = (rank, world, exchange))]
fn _host_workspace_addresses(rank: u32, world: u32, exchange: Py<PyAny>) -> PyResult<Vec<u64>> {
    purlin::validate::check_world(world).map_err(BindingError::from)?;
    purlin::validate::check_rank(rank, world).map_err(BindingError::from)?;
    let bootstrap = Arc::new(PyBootstrap::new(rank, world, true, exchange));
    let ws = Workspace::with_shared(
        bootstrap.clone(),
        Arc::new(HostAllocator::new()),
        WorkspaceRequirements::small(),
    )
    .map_err(|e| prefer_bootstrap(&bootstrap, e.into()))?;
    let addrs = (0..world)
        .map(|r| ws.staging(r))
        .collect::<purlin::Result<Vec<u64>>>()
        .map_err(BindingError::from)?;
    ws.finalize()
        .map_err(|e| prefer_bootstrap(&bootstrap, e.into()))?;
    Ok(addrs)
}

/// A handle of rank `rank` of `world` on `device` with nothing behind it (as a finalized one):
/// every collective checks its arguments against it, then raises `RuntimeError`. For testing
/// the argument checks without a GPU. Internal.
#[pyfunction]
#[pyo3(signature = (rank, world, device, arch = 90))]
fn _unbound_handle(rank: u32, world: u32, device: usize, arch: u32) -> PyResult<ContextHandle> {
    purlin::validate::check_world(world).map_err(BindingError::from)?;
    purlin::validate::check_rank(rank, world).map_err(BindingError::from)?;
    Ok(ContextHandle::unbound(rank, world, device, arch_of(arch)?))
}

/// Whether a CUDA driver can be loaded here (the GPU tests skip without one).
#[pyfunction]
fn driver_present() -> bool {
    Gpu::driver_present()
}

/// Purlin's native module: collectives on torch tensors over the Rust host crate.
#[pymodule(name = "_native")]
mod native {
    #[pymodule_export]
    use super::collectives::{
        all_gather, all_gather_v, all_reduce, all_to_all, all_to_all_v, reduce_scatter,
        reduce_scatter_v,
    };
    #[pymodule_export]
    use super::handle::ContextHandle;
    #[pymodule_export]
    use super::{
        _host_workspace_addresses, _rust_all_reduce_host_us, _unbound_handle, create_context,
        driver_present, finalize, synchronize,
    };

    use pyo3::prelude::*;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        m.add("MAX_RANKS", purlin::purlin_device::context::MAX_RANKS)?;
        m.add(
            "STAGING_BUFFER_SIZE",
            purlin::workspace::WorkspaceRequirements::DEFAULT.staging_half_bytes,
        )?;
        m.add(
            "PACKET_BUFFER_SIZE",
            purlin::workspace::WorkspaceRequirements::DEFAULT.latency_window_bytes,
        )?;
        Ok(())
    }
}
