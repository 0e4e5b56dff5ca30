//! The communicator of one rank: [`Context`] owns a [`Workspace`], knows its stream, and
//! builds the `#[repr(C)]` [`DeviceContext`] that kernels take as a parameter. It holds no
//! host-side epoch state — epochs and counters live in the workspace's device memory — so it
//! serves any number of collectives, and launches made with it can be captured in CUDA graphs.
//!
//! ```
//! use purlin::bootstrap::run_in_process;
//! use purlin::memory::HostAllocator;
//! use purlin::workspace::{Workspace, WorkspaceRequirements};
//! use purlin::Context;
//! // The CPU emulation: two ranks as threads, host memory.
//! run_in_process(2, |b| {
//!     let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
//!     let ctx = Context::new_host(ws.rank(), 2, ws)?;
//!     let view = ctx.device_view();
//!     assert_eq!((view.world, view.staging_half_bytes), (2, 1 << 20));
//!     ctx.finalize()
//! })?;
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::fault::{self, FAULT_BYTES};
use crate::gpu::Gpu;
use crate::launch::{Kernel, KernelArgs, LaunchShape, StreamOrder};
use crate::memory::Memory;
use crate::validate;
use crate::workspace::Workspace;
use cudarc::driver::CudaStream;
use purlin_device::context::{LocalState, MAX_RANKS};
use purlin_device::snac::window::WindowFault;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use purlin_device::context::Context as DeviceContext;

/// How long a kernel's wait for a peer may spin by default before it records a fault.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One rank's communicator. See the [module docs](self).
///
/// Teardown ([`finalize`](Context::finalize), or drop, which logs failures instead of
/// returning them) waits for the context's stream, then tears the workspace down
/// collectively: every rank of the communicator must finalize or drop its context.
///
/// ```no_run
/// use purlin::bootstrap::{Bootstrap, InProcess};
/// use purlin::memory::DeviceAllocator;
/// use purlin::workspace::{Workspace, WorkspaceRequirements};
/// use purlin::Context;
/// // The virtual node: four ranks on GPU 0, one thread and one stream each.
/// let gpu = purlin::Gpu::open(0)?;
/// std::thread::scope(|s| {
///     for b in InProcess::group(4)? {
///         let gpu = gpu.clone();
///         s.spawn(move || -> purlin::Result<()> {
///             let stream = gpu.new_stream()?;
///             let ws = Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::default())?;
///             let ctx = Context::new(b.rank(), b.world(), ws, &stream)?;
///             // ... collectives on `stream` with `ctx` ...
///             ctx.synchronize()?; // waits, and reports a timed-out wait as Error::Timeout
///             ctx.finalize()
///         });
///     }
///     Ok::<(), purlin::Error>(())
/// })?;
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Debug)]
pub struct Context {
    view: DeviceContext,
    workspace: Workspace,
    stream: Option<Arc<CudaStream>>,
    poisoned: Mutex<Option<String>>,
    /// Bounce buffer of device-to-host reads (allocated on first use).
    pinned: Mutex<Option<crate::cuda::Pinned>>,
    /// A private stream and bounce buffer for polls that must not queue behind the context's
    /// stream (allocated on first use).
    side: Mutex<Option<(Arc<CudaStream>, crate::cuda::Pinned)>>,
    /// The live symmetric buffers made on this context, which its collectives recognise.
    symmetric: Arc<crate::allocation::registry::Registry>,
    released: bool,
}

impl Context {
    /// The context of `rank` in a communicator of `world` ranks, on `stream` (which must
    /// belong to the workspace's GPU). `rank` and `world` must be the bootstrap's.
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context};
    /// let b = InProcess::group(1)?.remove(0);
    /// let gpu = purlin::Gpu::open(0)?;
    /// let stream = gpu.new_stream()?;
    /// let ws = Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?;
    /// let ctx = Context::new(0, 1, ws, &stream)?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn new(
        rank: u32,
        world: u32,
        workspace: Workspace,
        stream: &Arc<CudaStream>,
    ) -> Result<Self> {
        let ordinal = stream.context().ordinal();
        match workspace.memory() {
            Memory::Device { ordinal: ws } if ws == ordinal => {}
            other => {
                return Err(Error::WrongDevice {
                    what: "workspace",
                    expected: format!("GPU {ordinal} (the stream's)"),
                    found: other.to_string(),
                });
            }
        }
        Self::build(rank, world, workspace, Some(stream.clone()))
    }

    /// The context of `rank` over a host-memory workspace, for the CPU emulation (no stream:
    /// collectives run on CPU threads).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// let b = InProcess::group(1)?.remove(0);
    /// let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
    /// let ctx = Context::new_host(0, 1, ws)?;
    /// assert!(ctx.stream().is_none());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn new_host(rank: u32, world: u32, workspace: Workspace) -> Result<Self> {
        if workspace.memory() != Memory::Host {
            return Err(Error::WrongDevice {
                what: "workspace",
                expected: "host memory (Context::new_host)".into(),
                found: workspace.memory().to_string(),
            });
        }
        Self::build(rank, world, workspace, None)
    }

    fn build(
        rank: u32,
        world: u32,
        workspace: Workspace,
        stream: Option<Arc<CudaStream>>,
    ) -> Result<Self> {
        validate::check_membership(rank, world, workspace.rank(), workspace.world())?;
        let view = device_view(&workspace, DEFAULT_TIMEOUT)?;
        Ok(Self {
            view,
            workspace,
            stream,
            poisoned: Mutex::new(None),
            pinned: Mutex::new(None),
            side: Mutex::new(None),
            symmetric: Arc::default(),
            released: false,
        })
    }

    /// The live symmetric buffers made on this context.
    pub(crate) fn symmetric_buffers(&self) -> &Arc<crate::allocation::registry::Registry> {
        &self.symmetric
    }

    /// Whether every rank reaches every other rank's ordinary buffers: all ranks are threads
    /// of this process, on host memory or all on this rank's GPU (so any memory one rank's
    /// kernels reach, every rank's do). The same answer on every rank: each sees the same
    /// bootstrap and the same set of GPUs.
    ///
    /// Ranks on several GPUs of one process reach only the peers' memory their GPU was granted
    /// (plain allocations once peer access is on, but not memory pools or virtual memory
    /// mapped without access): those stage, as ranks in several processes do.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert!(ctx.shares_address_space());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn shares_address_space(&self) -> bool {
        let ws = &self.workspace;
        ws.bootstrap().same_process()
            && (ws.memory() == crate::memory::Memory::Host
                || ws.ranks_on_this_gpu() == self.world())
    }

    /// This rank.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert_eq!(ctx.rank(), 0);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn rank(&self) -> u32 {
        self.view.rank
    }

    /// Ranks in the communicator.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert_eq!(ctx.world(), 1);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn world(&self) -> u32 {
        self.view.world
    }

    /// The device view kernels take as a parameter (`#[repr(C)]`, the same bytes on host and
    /// device). Pass it to a host-launched collective, or into your own kernel that calls
    /// collectives from device code.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// let view = ctx.device_view();
    /// assert_eq!(view.staging[0], ctx.workspace().staging(0)?);
    /// assert_eq!(view.staging[1], 0); // unused ranks are null
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn device_view(&self) -> DeviceContext {
        self.view
    }

    /// The workspace the context owns.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::{HostAllocator, Memory}, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert_eq!(ctx.workspace().memory(), Memory::Host);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The stream collectives of this context run on (`None` for the CPU emulation).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert!(ctx.stream().is_none());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn stream(&self) -> Option<&Arc<CudaStream>> {
        self.stream.as_ref()
    }

    /// Makes later launches, [`synchronize`](Context::synchronize) and teardown use `stream`
    /// (of the context's GPU) instead of the stream the context was made with. For callers
    /// that pick the stream per call, as the Python bindings do with the raw `cudaStream_t`
    /// of each call: wrap it with `CudaContext::wrap_borrowed_stream` first. Nothing is
    /// synchronised: order the old stream's work before the new stream's yourself. Refused on
    /// a host-memory (CPU emulation) context.
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// let gpu = purlin::Gpu::open(0)?;
    /// let (first, second) = (gpu.new_stream()?, gpu.new_stream()?);
    /// let ws = Workspace::new(&b, DeviceAllocator::new(gpu.clone()), WorkspaceRequirements::small())?;
    /// let mut ctx = Context::new(0, 1, ws, &first)?;
    /// ctx.set_stream(&second)?;
    /// assert_eq!(ctx.stream().map(|s| s.cu_stream()), Some(second.cu_stream()));
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn set_stream(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        let Some(gpu) = self.gpu() else {
            return Err(Error::Unsupported(
                "streams on a host-memory (CPU emulation) context".into(),
            ));
        };
        let ordinal = stream.context().ordinal();
        if ordinal != gpu.ordinal() {
            return Err(Error::WrongDevice {
                what: "stream",
                expected: format!("GPU {} (the context's)", gpu.ordinal()),
                found: format!("GPU {ordinal}"),
            });
        }
        self.stream = Some(stream.clone());
        Ok(())
    }

    /// The GPU (`None` for the CPU emulation).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert!(ctx.gpu().is_none());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn gpu(&self) -> Option<&Arc<Gpu>> {
        self.workspace.gpu()
    }

    /// How long a kernel's wait may spin before it gives up and records a fault.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert_eq!(ctx.timeout(), purlin::context::DEFAULT_TIMEOUT);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        Duration::from_nanos(self.view.timeout_ns)
    }

    /// Sets the wait bound of later launches (it travels in the device view), clamped to
    /// 1 ms ..= [`MAX_TIMEOUT`]: every wait stays bounded.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let mut ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// ctx.set_timeout(std::time::Duration::from_millis(250));
    /// assert_eq!(ctx.device_view().timeout_ns, 250_000_000);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.view.timeout_ns = timeout_ns(timeout);
    }

    /// Fails with [`Error::Poisoned`] if an earlier fault left the context unusable. Every
    /// launch through the context calls it first.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert!(ctx.ensure_usable().is_ok());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn ensure_usable(&self) -> Result<()> {
        match &*self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(reason) => Err(Error::Poisoned {
                rank: self.rank(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The phase times of this rank's last call made with
    /// [`Options::trace`](crate::collective::Options::trace) (see [`crate::trace`]). On a GPU
    /// it waits for the stream first (not capturable: call it after the calls or replays).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// // No call was traced yet.
    /// assert_eq!(ctx.last_call_trace()?, purlin::trace::CallTrace::default());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn last_call_trace(&self) -> Result<crate::trace::CallTrace> {
        let mut bytes = [0u8; LocalState::TRACE_BYTES];
        let at = self.view.state + LocalState::TRACE as u64;
        match &self.stream {
            // SAFETY: the trace lies inside this rank's state allocation.
            Some(_) => unsafe { self.read_device(at, &mut bytes) }?,
            None => {
                for (i, b) in bytes.iter_mut().enumerate() {
                    // SAFETY: host memory of the state allocation; volatile because emulated
                    // kernels on other threads may have written it.
                    *b = unsafe { std::ptr::read_volatile((at as *const u8).add(i)) };
                }
            }
        }
        let mut times = [0u64; crate::trace::POINTS];
        for (t, w) in times.iter_mut().zip(bytes.as_chunks::<8>().0) {
            *t = u64::from_le_bytes(*w);
        }
        Ok(crate::trace::CallTrace::from_times(times))
    }

    /// Reads the fault record of the local state: [`Error::Timeout`] naming the collective,
    /// rank, peer and epoch if a kernel's wait ran out (the context is then poisoned), `Ok`
    /// otherwise. On a GPU it waits for the stream first (so it is not capturable: call it
    /// after a graph replay or a batch of collectives, not inside one).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert!(ctx.check_fault().is_ok());
    /// // A (simulated) timed-out wait of an AllGather, as a kernel would leave it:
    /// let mut record = [0u8; 64];
    /// (record[0], record[4], record[8], record[32]) = (1, 1, 2, 5);
    /// let at = ctx.device_view().state + purlin::purlin_device::context::LocalState::FAULT as u64;
    /// // SAFETY: the fault record is 64 bytes of this host-memory state; nothing else uses it.
    /// unsafe { std::ptr::copy_nonoverlapping(record.as_ptr(), at as *mut u8, 64) };
    /// assert!(matches!(ctx.check_fault(), Err(purlin::Error::Timeout { collective: "all_gather", epoch: 5, .. })));
    /// assert!(matches!(ctx.ensure_usable(), Err(purlin::Error::Poisoned { .. })));
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn check_fault(&self) -> Result<()> {
        self.ensure_usable()?;
        // The collectives' fault record and, right after it, the window waits'.
        let mut record = [0u8; FAULT_BYTES + LocalState::WINDOW_FAULT_BYTES];
        let at = self.view.state + LocalState::FAULT as u64;
        match &self.stream {
            // SAFETY: the fault record lies inside this rank's state allocation.
            Some(_) => unsafe { self.read_device(at, &mut record) }?,
            None => {
                for (i, b) in record.iter_mut().enumerate() {
                    // SAFETY: host memory of the state allocation; volatile because emulated
                    // kernels on other threads may have written it.
                    *b = unsafe { std::ptr::read_volatile((at as *const u8).add(i)) };
                }
            }
        }
        let (collective, window) = record.split_at(FAULT_BYTES);
        let collective: &[u8; FAULT_BYTES] = collective.try_into().expect("split at its size");
        let window = window.try_into().expect("the rest is the window record");
        let error = match (
            fault::decode_fault_record(collective),
            WindowFault::decode(window),
        ) {
            (Some(f), _) => fault::fault_error(&f),
            (None, Some(w)) => Error::Timeout {
                collective: "p2p wait",
                rank: self.rank(),
                peer: w.from,
                epoch: w.awaited,
                peer_missing: false,
                waiting_for: "its signal",
            },
            (None, None) => return Ok(()),
        };
        *self.poisoned.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
        Err(error)
    }

    /// Copies `dst.len()` bytes from device address `src` to the host through the context's
    /// stream (after its queued work), and waits. Bounces through a pinned buffer, so the
    /// thread never blocks inside a pageable copy (which would stall other ranks' copies on the
    /// virtual node).
    ///
    /// # Safety
    /// `src` is an address of this context's GPU (or mapped into it) valid for `dst.len()`
    /// bytes.
    pub(crate) unsafe fn read_device(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        let Some(stream) = &self.stream else {
            return Err(Error::Unsupported("device reads on a host context".into()));
        };
        if dst.is_empty() {
            return Ok(());
        }
        let mut pinned = self.pinned.lock().unwrap_or_else(|e| e.into_inner());
        let want = dst.len().clamp(4096, crate::cuda::Pinned::MAX);
        if pinned.as_ref().is_none_or(|p| p.len() < want) {
            *pinned = None;
            *pinned = Some(crate::cuda::Pinned::new(stream.context(), want)?);
        }
        let bounce = pinned.as_mut().expect("allocated above");
        // SAFETY: forwarded contract.
        unsafe { crate::cuda::read_bytes(stream, src, dst, bounce) }
    }

    /// Reads a few bytes (at most 4 KiB) from device address `src` *now*, through a private
    /// stream: not ordered after the context's stream, so a poll stays bounded whatever is
    /// queued there (a stream wait, a long kernel).
    ///
    /// # Safety
    /// As [`read_device`](Context::read_device).
    pub(crate) unsafe fn poll_device(&self, src: u64, dst: &mut [u8]) -> Result<()> {
        let Some(stream) = &self.stream else {
            return Err(Error::Unsupported("device reads on a host context".into()));
        };
        if dst.len() > 4096 {
            return Err(Error::InvalidArgument {
                what: "dst",
                reason: "a poll reads at most 4 KiB".into(),
            });
        }
        let mut side = self.side.lock().unwrap_or_else(|e| e.into_inner());
        if side.is_none() {
            let s = stream.context().new_stream()?;
            let p = crate::cuda::Pinned::new(stream.context(), 4096)?;
            *side = Some((s, p));
        }
        let (s, bounce) = side.as_mut().expect("created above");
        // SAFETY: forwarded contract.
        unsafe { crate::cuda::read_bytes(s, src, dst, bounce) }
    }

    /// Waits for everything queued on the context's stream, then checks the fault record (see
    /// [`check_fault`](Context::check_fault)).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// ctx.synchronize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn synchronize(&self) -> Result<()> {
        if let Some(stream) = &self.stream {
            stream.synchronize()?;
        }
        self.check_fault()
    }

    /// Launches one of Purlin's embedded kernels (the collectives' and the Atoms') on the
    /// context's GPU and stream: refused on a poisoned or host context, and for more threads
    /// per block than the GPU's native Atom is laid out for (a collective called from the
    /// kernel would refuse them anyway); a name Purlin does not have is
    /// [`Error::MissingKernel`]. A kernel of your own that calls collectives lives in your PTX:
    /// load it with [`Module::load`](crate::module::Module::load) and launch it there.
    /// Asynchronous and capturable in a CUDA graph.
    ///
    /// # Safety
    /// As [`Kernel::launch`].
    ///
    /// ```no_run
    /// use purlin::launch::{Kernel, LaunchShape};
    /// use purlin::context::DeviceContext;
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// // SAFETY: the sm_70 Atom's grid-wide copy takes (dst, src, bytes).
    /// const COPY: Kernel<(u64, u64, u64)> = unsafe { Kernel::new("purlin_atom_copy_sm70") };
    /// // SAFETY: zero bytes touch no memory.
    /// unsafe { ctx.launch(&COPY, LaunchShape { blocks: 1, threads: 128, smem_bytes: 0 }, (0, 0, 0))? };
    /// // Not one of Purlin's kernels: refused before anything is launched.
    /// const MINE: Kernel<(DeviceContext,)> = unsafe { Kernel::new("my_fused_kernel") };
    /// // SAFETY: refused.
    /// let refused = unsafe { ctx.launch(&MINE, LaunchShape { blocks: 1, threads: 128, smem_bytes: 0 }, (ctx.device_view(),)) };
    /// assert!(matches!(refused, Err(purlin::Error::MissingKernel { .. })));
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub unsafe fn launch<A: KernelArgs>(
        &self,
        kernel: &Kernel<A>,
        shape: LaunchShape,
        args: A,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.launch_ordered(kernel, shape, args, StreamOrder::AfterPrevious) }
    }

    /// [`launch`](Self::launch) in the stream order `order`.
    ///
    /// # Safety
    /// As [`launch`](Self::launch); with [`StreamOrder::Overlapping`], the kernel waits for
    /// the work before it on the stream before it touches memory.
    pub(crate) unsafe fn launch_ordered<A: KernelArgs>(
        &self,
        kernel: &Kernel<A>,
        shape: LaunchShape,
        args: A,
        order: StreamOrder,
    ) -> Result<()> {
        self.ensure_usable()?;
        let (Some(gpu), Some(stream)) = (self.gpu(), &self.stream) else {
            return Err(Error::Unsupported(
                "kernel launches on a host-memory (CPU emulation) context".into(),
            ));
        };
        crate::launch::check_fused_shape(gpu.arch(), &shape)?;
        // SAFETY: forwarded contract.
        unsafe { kernel.launch_ordered(gpu, stream, shape, args, order) }
    }

    /// Waits for the stream and frees everything, collectively; every step runs even after an
    /// error, and the first error is returned.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context};
    /// # let b = InProcess::group(1)?.remove(0);
    /// let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// ctx.finalize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn finalize(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        // Work in flight may still use the workspace: wait for it before the teardown.
        let synced = match &self.stream {
            Some(s) => s.synchronize().map_err(Error::from),
            None => Ok(()),
        };
        if let Err(e) = &synced {
            tracing::warn!(%e, rank = self.rank(), "waiting for the stream before teardown failed");
        }
        drop(self.pinned.lock().unwrap_or_else(|e| e.into_inner()).take());
        let side = self.side.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(Err(e)) = side.map(|(stream, _pinned)| stream.synchronize()) {
            tracing::warn!(%e, "waiting for the poll stream before teardown failed");
        }
        let released = self.workspace.release();
        synced.and(released)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::error!(%e, "tearing down a Purlin context in drop failed");
        }
    }
}

/// The longest wait bound a context accepts ([`Context::set_timeout`] clamps to it): long
/// enough for any collective, short enough that a lost peer ends in an error.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

fn timeout_ns(t: Duration) -> u64 {
    let t = t.clamp(Duration::from_millis(1), MAX_TIMEOUT);
    u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
}

/// The device view of a workspace: every rank's staging and signals as this rank addresses
/// them, this rank's state, the sizes, and the wait bound.
fn device_view(ws: &Workspace, timeout: Duration) -> Result<DeviceContext> {
    let mut staging = [0u64; MAX_RANKS];
    let mut signals = [0u64; MAX_RANKS];
    for r in 0..ws.world() {
        staging[r as usize] = ws.staging(r)?;
        signals[r as usize] = ws.signals(r)?;
    }
    let req = ws.requirements();
    Ok(DeviceContext {
        staging,
        signals,
        state: ws.state(),
        staging_half_bytes: req.staging_half_bytes,
        latency_window_bytes: req.latency_window_bytes,
        timeout_ns: timeout_ns(timeout),
        rank: ws.rank(),
        world: ws.world(),
    })
}
