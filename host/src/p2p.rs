//! Point-to-point transfers through symmetric [`Window`]s: a rank *puts* bytes straight into a
//! peer's window with an Atom copy on the peer's address, then *signals* it (a release store
//! into the peer's signal word, ordered after the copy); the peer *waits* until the signal
//! reaches the value (bounded on the host, or stream-ordered on the GPU).
//!
//! Windows are allocated collectively, like the workspace, through the context's bootstrap
//! and allocator. Signal values are monotonic: use a new, larger value for each transfer.
//!
//! ```
//! use purlin::bootstrap::{Bootstrap, run_in_process};
//! use purlin::memory::{HostAllocator, Span};
//! use purlin::workspace::{Workspace, WorkspaceRequirements};
//! use purlin::{Context, p2p::Window};
//! use std::time::Duration;
//! // The CPU emulation: rank 0 sends 1 KiB to rank 1.
//! run_in_process(2, |b| {
//!     let ws = Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?;
//!     let ctx = Context::new_host(b.rank(), 2, ws)?;
//!     let window = Window::new(&ctx, 1024)?;
//!     if ctx.rank() == 0 {
//!         let data = vec![7u8; 1024];
//!         // SAFETY: `data` is 1 KiB of host memory, alive until the put returns.
//!         unsafe { window.put(&ctx, 1, 0, Span::from_host(&data))? };
//!         window.signal(&ctx, 1, 1)?;
//!     } else {
//!         window.wait(&ctx, 0, 1, Duration::from_secs(10))?;
//!         let mut got = vec![0u8; 1024];
//!         window.read_local(&ctx, 0, &mut got)?;
//!         assert!(got.iter().all(|&x| x == 7));
//!     }
//!     window.finalize()?;
//!     ctx.finalize()
//! })?;
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::allocation::Symmetric;
use crate::atom::{self, AtomKind};
use crate::context::Context;
use crate::cuda;
use crate::error::{Error, Result};
use crate::launch::{Kernel, LaunchShape};
use crate::memory::{Memory, Span};
use crate::validate;
use purlin_device::context::MAX_RANKS;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Alignment of a put's source and destination (one 16-byte vector).
pub const PUT_ALIGN: u64 = 16;

/// Bytes one block of a put copies, roughly: a put of `n` bytes uses `n / BYTES_PER_BLOCK`
/// blocks, between 1 and the GPU's SM count.
pub const BYTES_PER_BLOCK: u64 = 256 << 10;

/// A symmetric buffer: `bytes` bytes on every rank, addressable by every rank, plus one
/// signal word per sender. Made collectively; torn down collectively
/// ([`finalize`](Window::finalize) or drop) — before the context it was made from.
///
/// ```
/// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
/// # let b = InProcess::group(1)?.remove(0);
/// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
/// let w = Window::new(&ctx, 4096)?;
/// assert_eq!(w.bytes(), 4096);
/// assert_eq!(w.peer(0)?, w.local());
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Debug)]
pub struct Window {
    sym: Symmetric,
    bytes: u64,
    signal_offset: u64,
}

impl Window {
    /// Allocates `bytes` on every rank of `ctx`'s communicator (a collective call, the same
    /// `bytes` everywhere) through the context's allocator, and maps every peer's.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// let w = Window::new(&ctx, 100)?;
    /// assert_eq!(w.local().addr % 256, 0);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn new(ctx: &Context, bytes: u64) -> Result<Window> {
        let signal_offset =
            bytes
                .checked_add(255)
                .map(|b| b & !255)
                .ok_or_else(|| Error::InvalidArgument {
                    what: "bytes",
                    reason: format!("a window of {bytes} bytes overflows"),
                })?;
        let total = signal_offset + (MAX_RANKS * 8) as u64;
        // Puts launch Atom kernels while peers may already wait for them: load them first.
        if let Some(gpu) = ctx.gpu() {
            gpu.load_atom_kernels()?;
        }
        let ws = ctx.workspace();
        let sym = Symmetric::new(ws.bootstrap().clone(), ws.allocator().clone(), total)?;
        Ok(Window {
            sym,
            bytes,
            signal_offset,
        })
    }

    /// Bytes of data per rank.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert_eq!(Window::new(&ctx, 10)?.bytes(), 10);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn rank(&self) -> u32 {
        self.sym.bootstrap.rank()
    }

    fn world(&self) -> u32 {
        self.sym.bootstrap.world()
    }

    /// This rank's data.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert_eq!(Window::new(&ctx, 64)?.local().bytes, 64);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn local(&self) -> Span {
        Span::new(self.sym.local(), self.bytes)
    }

    /// Rank `rank`'s data, as this rank addresses it.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// let w = Window::new(&ctx, 64)?;
    /// assert!(matches!(w.peer(1), Err(purlin::Error::RankOutOfRange { .. })));
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn peer(&self, rank: u32) -> Result<Span> {
        validate::check_rank(rank, self.world())?;
        Ok(Span::new(self.sym.addrs[rank as usize], self.bytes))
    }

    /// The signal word on rank `owner` that rank `sender` writes, as this rank addresses it.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// let w = Window::new(&ctx, 64)?;
    /// assert_eq!(w.signal_addr(0, 0)? % 8, 0);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn signal_addr(&self, owner: u32, sender: u32) -> Result<u64> {
        validate::check_rank(owner, self.world())?;
        validate::check_rank(sender, self.world())?;
        Ok(self.sym.addrs[owner as usize] + self.signal_offset + 8 * sender as u64)
    }

    fn check_context(&self, ctx: &Context) -> Result<()> {
        if ctx.rank() != self.rank() || ctx.world() != self.world() {
            return Err(Error::InvalidArgument {
                what: "ctx",
                reason: format!(
                    "rank {} of {} is not the window's rank {} of {}",
                    ctx.rank(),
                    ctx.world(),
                    self.rank(),
                    self.world()
                ),
            });
        }
        if ctx.workspace().memory() != self.sym.memory() {
            return Err(Error::WrongDevice {
                what: "window",
                expected: ctx.workspace().memory().to_string(),
                found: self.sym.memory().to_string(),
            });
        }
        ctx.ensure_usable()
    }

    /// Copies `src` (local memory of this rank) into `peer`'s window at byte `offset`, on the
    /// context's stream with the GPU's native Atom (on the CPU emulation: the host Atom, now).
    /// Nothing tells the peer: follow with [`signal`](Window::signal).
    ///
    /// # Safety
    /// `src` is valid for reads of `src.bytes` bytes (device memory of this rank's GPU, or host
    /// memory for the emulation) until the copy has finished on the stream, and no one else
    /// writes the destination range meanwhile.
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::{DeviceAllocator, Span}, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// let w = Window::new(&ctx, 1 << 20)?;
    /// let src = stream.clone_htod(&vec![1u8; 1 << 20])?;
    /// // SAFETY: `src` lives until the stream is synchronised.
    /// unsafe { w.put(&ctx, 0, 0, Span::from_device(&src, &stream))? };
    /// stream.synchronize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub unsafe fn put(&self, ctx: &Context, peer: u32, offset: u64, src: Span) -> Result<()> {
        let atom = match ctx.gpu() {
            Some(gpu) => AtomKind::available_in(gpu.arch()).last(),
            None => None,
        };
        // SAFETY: forwarded contract.
        unsafe { self.put_with(ctx, peer, offset, src, atom, None) }
    }

    /// [`put`](Window::put) with a chosen Atom and block count (`None`: the native Atom, and
    /// blocks from the size). Ignored on the CPU emulation.
    ///
    /// # Safety
    /// As [`put`](Window::put).
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::{DeviceAllocator, Span}, workspace::*, Context, p2p::Window, atom::AtomKind};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// let w = Window::new(&ctx, 4096)?;
    /// let src = stream.clone_htod(&vec![1u8; 4096])?;
    /// // SAFETY: `src` lives until the stream is synchronised.
    /// unsafe { w.put_with(&ctx, 0, 0, Span::from_device(&src, &stream), Some(AtomKind::Sm70), Some(2))? };
    /// stream.synchronize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub unsafe fn put_with(
        &self,
        ctx: &Context,
        peer: u32,
        offset: u64,
        src: Span,
        atom: Option<AtomKind>,
        blocks: Option<u32>,
    ) -> Result<()> {
        self.check_context(ctx)?;
        let dst = plan_put(self.peer_span(peer)?, self.world(), peer, offset, src)?;
        if src.bytes == 0 {
            return Ok(());
        }
        match (ctx.gpu(), ctx.stream()) {
            (Some(gpu), Some(stream)) => {
                let atom = match atom {
                    Some(a) => a,
                    None => AtomKind::available_in(gpu.arch())
                        .last()
                        .expect("every architecture has the Sm70 Atom"),
                };
                let blocks = blocks.unwrap_or_else(|| {
                    (src.bytes.div_ceil(BYTES_PER_BLOCK) as u32).clamp(1, gpu.sm_count().max(1))
                });
                // SAFETY: `dst` lies inside the peer's mapped window (checked by `plan_put`);
                // the caller guarantees `src`.
                unsafe {
                    atom::copy(
                        gpu,
                        stream,
                        atom::Launch {
                            atom,
                            blocks,
                            layout: atom::GridLayout::Blocks,
                        },
                        dst.addr,
                        src.addr,
                        src.bytes,
                    )
                }
            }
            _ => {
                use purlin_device::atom::{Atom, Host};
                // SAFETY: host memory: `dst` lies inside the peer's window (checked), `src` is
                // guaranteed by the caller; both 16-byte aligned; the host Atom needs no
                // shared memory.
                unsafe {
                    Host::copy(
                        purlin_device::coop::Coop::block(),
                        dst.addr as *mut u8,
                        src.addr as *const u8,
                        src.bytes as usize,
                        std::ptr::null_mut(),
                    )
                };
                Ok(())
            }
        }
    }

    fn peer_span(&self, peer: u32) -> Result<Span> {
        self.peer(peer)
    }

    /// Sets `peer`'s signal word for this rank to `value`, after everything queued before it
    /// on the context's stream (release: the peer that sees the value sees the data put
    /// before it). Stream-ordered and capturable on a GPU; immediate on the CPU emulation.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// let w = Window::new(&ctx, 64)?;
    /// w.signal(&ctx, 0, 3)?;
    /// assert_eq!(w.signal_value(&ctx, 0)?, 3);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn signal(&self, ctx: &Context, peer: u32, value: u64) -> Result<()> {
        self.check_context(ctx)?;
        let addr = self.signal_addr(peer, self.rank())?;
        match ctx.stream() {
            // SAFETY: `addr` is an aligned word of the peer's mapped window.
            Some(stream) => unsafe { cuda::stream_write_u64(stream, addr, value) },
            None => {
                // SAFETY: an aligned word of a live host-memory window, only accessed atomically.
                unsafe { AtomicU64::from_ptr(addr as *mut u64) }.store(value, Ordering::Release);
                Ok(())
            }
        }
    }

    /// The current value of this rank's signal word written by `from`, read now (on a GPU
    /// through a private stream, not after the context's queued work, so it never blocks
    /// behind a stream wait or a running kernel).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// let w = Window::new(&ctx, 64)?;
    /// assert_eq!(w.signal_value(&ctx, 0)?, 0);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn signal_value(&self, ctx: &Context, from: u32) -> Result<u64> {
        self.check_context(ctx)?;
        let addr = self.signal_addr(self.rank(), from)?;
        match ctx.stream() {
            Some(_) => {
                let mut word = [0u8; 8];
                // SAFETY: an aligned word of this rank's window.
                unsafe { ctx.poll_device(addr, &mut word) }?;
                Ok(u64::from_le_bytes(word))
            }
            // SAFETY: as in `signal`.
            None => Ok(unsafe { AtomicU64::from_ptr(addr as *mut u64) }.load(Ordering::Acquire)),
        }
    }

    /// Waits on the host until `from` has signalled at least `value`, for at most `timeout`
    /// ([`Error::Timeout`] names the peer and the value otherwise). On return, what `from` put
    /// before signalling is visible to this rank's later work.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// let w = Window::new(&ctx, 64)?;
    /// let late = w.wait(&ctx, 0, 1, std::time::Duration::from_millis(5));
    /// assert!(matches!(late, Err(purlin::Error::Timeout { peer: 0, epoch: 1, .. })));
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn wait(&self, ctx: &Context, from: u32, value: u64, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(5);
        loop {
            if self.signal_value(ctx, from)? >= value {
                return Ok(());
            }
            if start.elapsed() >= timeout {
                return Err(Error::Timeout {
                    collective: "p2p wait",
                    rank: self.rank(),
                    peer: from,
                    epoch: value,
                    peer_missing: false,
                    waiting_for: "its signal",
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// Makes the context's stream wait until `from` has signalled at least `value` (GPU only;
    /// stream-ordered and capturable): a one-thread kernel (`purlin_window_wait`) polls the
    /// signal. The wait is bounded by the context's [timeout](Context::timeout): past it the
    /// kernel records the timeout and ends, the stream goes on, and the next
    /// [`synchronize`](Context::synchronize) (or [`check_fault`](Context::check_fault)) returns
    /// [`Error::Timeout`] naming `from` and poisons the context. On the virtual node, do not
    /// block the host thread in a copy to or from *pageable* host memory queued behind this wait
    /// (`stream.clone_dtoh`, say): the driver's pageable staging is shared by the process, so
    /// other ranks' pageable copies — perhaps the ones that lead to the signal — stall behind
    /// it. Purlin's own reads ([`read_local`](Window::read_local),
    /// [`signal_value`](Window::signal_value)) bounce through pinned memory.
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// let w = Window::new(&ctx, 64)?;
    /// w.signal(&ctx, 0, 1)?;
    /// w.wait_on_stream(&ctx, 0, 1)?; // this rank signalled 1 just before
    /// ctx.synchronize()?;
    /// w.wait_on_stream(&ctx, 0, 2)?; // never signalled: a timeout after the context's bound
    /// assert!(matches!(ctx.synchronize(), Err(purlin::Error::Timeout { peer: 0, epoch: 2, .. })));
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn wait_on_stream(&self, ctx: &Context, from: u32, value: u64) -> Result<()> {
        self.check_context(ctx)?;
        let addr = self.signal_addr(self.rank(), from)?;
        if ctx.stream().is_none() {
            return Err(Error::Unsupported(
                "stream waits on a host-memory (CPU emulation) context".into(),
            ));
        }
        // SAFETY: the kernel takes (Context, signal address, value, from) and only reads the
        // signal, an aligned word of this rank's window. The window's memory outlives the
        // kernel: freeing it (`cuMemFree`, at the window's teardown) waits for the GPU's
        // running work, and the kernel ends within the context's timeout.
        const WAIT: Kernel<(purlin_device::context::Context, u64, u64, u32)> =
            unsafe { Kernel::new(crate::kernels::WINDOW_WAIT_KERNEL) };
        let shape = LaunchShape {
            blocks: 1,
            threads: 1,
            smem_bytes: 0,
        };
        // SAFETY: as above.
        unsafe { ctx.launch(&WAIT, shape, (ctx.device_view(), addr, value, from)) }
    }

    /// Copies `dst.len()` bytes of this rank's window from byte `offset` to the host (after
    /// the stream's queued work, on a GPU).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// let w = Window::new(&ctx, 64)?;
    /// let mut out = [1u8; 8];
    /// w.read_local(&ctx, 56, &mut out)?;
    /// assert_eq!(out, [0; 8]);
    /// assert!(w.read_local(&ctx, 60, &mut out).is_err());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn read_local(&self, ctx: &Context, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.check_context(ctx)?;
        validate::check_range("window", offset, dst.len() as u64, self.bytes)?;
        let src = self.sym.local() + offset;
        match ctx.stream() {
            // SAFETY: the range lies inside this rank's window (checked).
            Some(_) => unsafe { ctx.read_device(src, dst) },
            None => {
                // SAFETY: host memory of this rank's window (checked range); the caller has
                // waited for the writer's signal.
                unsafe {
                    std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len())
                };
                Ok(())
            }
        }
    }

    /// Frees the window collectively (every rank must finalize or drop its window).
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::HostAllocator, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// Window::new(&ctx, 64)?.finalize()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn finalize(mut self) -> Result<()> {
        self.sym.release()
    }

    /// Where the window lives.
    ///
    /// ```
    /// # use purlin::{bootstrap::*, memory::{HostAllocator, Memory}, workspace::*, Context, p2p::Window};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let ctx = Context::new_host(0, 1, Workspace::new(&b, HostAllocator::new(), WorkspaceRequirements::small())?)?;
    /// assert_eq!(Window::new(&ctx, 64)?.memory(), Memory::Host);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn memory(&self) -> Memory {
        self.sym.memory()
    }
}

/// Checks a put of `src` into the window `dst_window` of `peer` (at byte `offset`) in a
/// communicator of `world` ranks, and returns the destination range. Pure: no device is
/// touched, so every bad input is testable without a GPU.
///
/// ```
/// use purlin::{Error, memory::Span, p2p::plan_put};
/// let window = Span::new(0x10000, 4096);
/// assert_eq!(plan_put(window, 2, 1, 16, Span::new(0x2000, 32))?, Span::new(0x10010, 32));
/// assert!(matches!(plan_put(window, 2, 2, 0, Span::new(0x2000, 32)), Err(Error::RankOutOfRange { .. })));
/// assert!(matches!(plan_put(window, 2, 1, 8, Span::new(0x2000, 32)), Err(Error::Misaligned { what: "destination", .. })));
/// assert!(matches!(plan_put(window, 2, 1, 0, Span::new(0x2008, 32)), Err(Error::Misaligned { what: "src", .. })));
/// assert!(matches!(plan_put(window, 2, 1, 0, Span::new(0, 32)), Err(Error::NullPointer { what: "src" })));
/// assert!(matches!(plan_put(window, 2, 1, 4080, Span::new(0x2000, 32)), Err(Error::BufferTooSmall { .. })));
/// # Ok::<(), purlin::Error>(())
/// ```
pub fn plan_put(dst_window: Span, world: u32, peer: u32, offset: u64, src: Span) -> Result<Span> {
    validate::check_rank(peer, world)?;
    validate::check_range("peer window", offset, src.bytes, dst_window.bytes)?;
    let dst = Span::new(dst_window.addr + offset, src.bytes);
    if src.bytes > 0 {
        validate::check_pointer("src", src.addr, PUT_ALIGN)?;
        validate::check_pointer("destination", dst.addr, PUT_ALIGN)?;
    }
    Ok(dst)
}
