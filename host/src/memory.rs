//! Where Purlin's buffers come from: the [`Allocator`] trait that a workspace and its
//! symmetric windows allocate through, the two allocators Purlin ships ([`DeviceAllocator`]
//! for GPU memory, [`HostAllocator`] for the CPU emulation), and [`Span`], an address range
//! handed to a call.
//!
//! ```
//! use purlin::memory::{Allocator, HostAllocator, Memory};
//! let host = HostAllocator::new();
//! let addr = host.allocate(4096)?;
//! assert_eq!(addr % 256, 0);
//! // SAFETY: `addr` came from `host.allocate(4096)` and is no longer used.
//! unsafe { host.free(addr, 4096)? };
//! assert_eq!(host.memory(), Memory::Host);
//! # Ok::<(), purlin::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use cudarc::driver::{result, sys};
use std::fmt;
use std::sync::Arc;

/// The least alignment every allocator must give (one 16-byte vector; Purlin's own allocators
/// give 256).
pub const MIN_ALIGN: u64 = 16;

/// The alignment [`DeviceAllocator`] and [`HostAllocator`] give.
pub const ALIGN: u64 = 256;

/// Where memory lives.
///
/// ```
/// use purlin::memory::Memory;
/// assert_eq!(Memory::Device { ordinal: 1 }.to_string(), "GPU 1");
/// assert_eq!(Memory::Host.to_string(), "host memory");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Memory {
    /// Ordinary host memory: addresses are CPU pointers, used by the CPU emulation.
    Host,
    /// Device memory of GPU `ordinal` (as this process numbers GPUs).
    Device {
        /// The CUDA device ordinal.
        ordinal: usize,
    },
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Memory::Host => f.write_str("host memory"),
            Memory::Device { ordinal } => write!(f, "GPU {ordinal}"),
        }
    }
}

/// A source of zeroed, aligned memory for workspaces and windows. Implement it to put
/// Purlin's buffers in memory you manage (a pool, a carve-out of a larger allocation).
///
/// Buffers of [`Memory::Device`] allocators are shared with peers in other processes through
/// CUDA IPC (`cuIpcGetMemHandle` on the allocation that contains them), so they must come
/// from `cuMemAlloc` or an allocation IPC accepts; in-process peers use the addresses directly.
///
/// # Safety
/// `allocate` returns the address of `bytes` bytes of [`memory`](Allocator::memory) that are
/// zero, aligned to at least [`MIN_ALIGN`], valid until `free` is called with the same address
/// and size, and used by nothing else meanwhile.
///
/// ```
/// use purlin::memory::{Allocator, HostAllocator, Memory};
/// use purlin::Result;
///
/// /// Counts what it hands out, allocating through the host allocator.
/// #[derive(Debug, Default)]
/// struct Counting { inner: HostAllocator, live: std::sync::atomic::AtomicU64 }
///
/// // SAFETY: forwards to `HostAllocator`, which upholds the contract.
/// unsafe impl Allocator for Counting {
///     fn memory(&self) -> Memory { Memory::Host }
///     fn allocate(&self, bytes: u64) -> Result<u64> {
///         self.live.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
///         self.inner.allocate(bytes)
///     }
///     unsafe fn free(&self, addr: u64, bytes: u64) -> Result<()> {
///         self.live.fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
///         // SAFETY: forwarded contract.
///         unsafe { self.inner.free(addr, bytes) }
///     }
/// }
/// let a = Counting::default();
/// let p = a.allocate(100)?;
/// // SAFETY: `p` came from `a.allocate(100)`.
/// unsafe { a.free(p, 100)? };
/// assert_eq!(a.live.load(std::sync::atomic::Ordering::Relaxed), 0);
/// # Ok::<(), purlin::Error>(())
/// ```
pub unsafe trait Allocator: Send + Sync + fmt::Debug {
    /// Where this allocator's memory lives.
    /// ```
    /// use purlin::memory::{Allocator, HostAllocator, Memory};
    /// let a = HostAllocator::new();
    /// assert_eq!(a.memory(), Memory::Host);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    fn memory(&self) -> Memory;

    /// `bytes` zeroed bytes (`bytes > 0`), aligned to at least [`MIN_ALIGN`].
    /// ```
    /// use purlin::memory::{Allocator, HostAllocator, Memory};
    /// let a = HostAllocator::new();
    /// let p = a.allocate(32)?;
    /// assert_eq!(p % 16, 0);
    /// // SAFETY: `p` came from `a.allocate(32)`.
    /// unsafe { a.free(p, 32)? };
    /// # Ok::<(), purlin::Error>(())
    /// ```
    fn allocate(&self, bytes: u64) -> Result<u64>;

    /// Returns a buffer.
    ///
    /// # Safety
    /// `addr` and `bytes` are those of a live allocation of this allocator, and nothing uses
    /// the buffer any more (no kernel in flight reads or writes it).
    /// ```
    /// use purlin::memory::{Allocator, HostAllocator, Memory};
    /// let a = HostAllocator::new();
    /// let p = a.allocate(32)?;
    /// // SAFETY: `p` came from `a.allocate(32)` and nothing uses it.
    /// unsafe { a.free(p, 32)? };
    /// # Ok::<(), purlin::Error>(())
    /// ```
    unsafe fn free(&self, addr: u64, bytes: u64) -> Result<()>;

    /// The GPU of a [`Memory::Device`] allocator, with Purlin's kernels loaded; `None` for host
    /// memory. The default opens `Gpu::open(ordinal)`.
    /// ```
    /// use purlin::memory::{Allocator, HostAllocator, Memory};
    /// let a = HostAllocator::new();
    /// assert!(a.gpu()?.is_none());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    fn gpu(&self) -> Result<Option<Arc<Gpu>>> {
        match self.memory() {
            Memory::Host => Ok(None),
            Memory::Device { ordinal } => Gpu::open(ordinal).map(Some),
        }
    }
}

/// Device memory of one GPU from `cuMemAlloc`, zeroed before it is handed out.
///
/// ```no_run
/// use purlin::memory::{Allocator, DeviceAllocator};
/// let gpu = purlin::Gpu::open(0)?;
/// let alloc = DeviceAllocator::new(gpu);
/// let addr = alloc.allocate(1 << 20)?;
/// // SAFETY: nothing uses the buffer.
/// unsafe { alloc.free(addr, 1 << 20)? };
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DeviceAllocator {
    gpu: Arc<Gpu>,
}

impl DeviceAllocator {
    /// An allocator of `gpu`'s memory.
    ///
    /// ```no_run
    /// let alloc = purlin::memory::DeviceAllocator::new(purlin::Gpu::open(0)?);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn new(gpu: Arc<Gpu>) -> Self {
        Self { gpu }
    }
}

// SAFETY: `cuMemAlloc` gives 256-byte aligned device memory owned by this allocation alone,
// zeroed (and the zeroing finished) before `allocate` returns.
unsafe impl Allocator for DeviceAllocator {
    fn memory(&self) -> Memory {
        Memory::Device {
            ordinal: self.gpu.ordinal(),
        }
    }

    fn allocate(&self, bytes: u64) -> Result<u64> {
        if bytes == 0 {
            return Err(Error::InvalidArgument {
                what: "bytes",
                reason: "an allocation needs at least one byte".into(),
            });
        }
        self.gpu.context().bind_to_thread()?;
        // SAFETY: the context is current; the size is non-zero.
        let addr = unsafe { result::malloc_sync(bytes as usize) }?;
        // Zero on the legacy stream and wait for it: Purlin's streams are non-blocking, so the
        // memset must be finished before any of them can touch the buffer.
        // SAFETY: `addr` holds `bytes` bytes of this context's memory.
        let zeroed = unsafe {
            result::memset_d8_async(addr, 0, bytes as usize, std::ptr::null_mut())
                .and_then(|()| result::stream::synchronize(std::ptr::null_mut()))
        };
        if let Err(e) = zeroed {
            // SAFETY: nothing else has seen the allocation.
            if let Err(free) = unsafe { result::free_sync(addr) } {
                tracing::warn!(%free, "freeing a buffer whose zeroing failed also failed");
            }
            return Err(e.into());
        }
        Ok(addr)
    }

    unsafe fn free(&self, addr: u64, _bytes: u64) -> Result<()> {
        self.gpu.context().bind_to_thread()?;
        // SAFETY: the caller guarantees a live allocation nothing uses any more.
        unsafe { result::free_sync(addr as sys::CUdeviceptr) }?;
        Ok(())
    }

    fn gpu(&self) -> Result<Option<Arc<Gpu>>> {
        Ok(Some(self.gpu.clone()))
    }
}

/// Zeroed host memory from the global allocator, [`ALIGN`]-aligned: the memory of the CPU
/// emulation, where a rank is a thread and a block is one CPU thread.
///
/// ```
/// use purlin::memory::{Allocator, HostAllocator};
/// let a = HostAllocator::new();
/// let p = a.allocate(64)?;
/// // SAFETY: `p` points to 64 zeroed bytes this allocation owns.
/// assert!(unsafe { std::slice::from_raw_parts(p as *const u8, 64) }.iter().all(|&b| b == 0));
/// // SAFETY: `p` came from `a.allocate(64)`.
/// unsafe { a.free(p, 64)? };
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct HostAllocator;

impl HostAllocator {
    /// The host allocator.
    ///
    /// ```
    /// let _ = purlin::memory::HostAllocator::new();
    /// ```
    pub const fn new() -> Self {
        Self
    }

    fn layout(bytes: u64) -> Result<std::alloc::Layout> {
        usize::try_from(bytes)
            .ok()
            .and_then(|b| std::alloc::Layout::from_size_align(b.max(1), ALIGN as usize).ok())
            .ok_or(Error::InvalidArgument {
                what: "bytes",
                reason: format!("{bytes} bytes cannot be allocated on this host"),
            })
    }
}

// SAFETY: `alloc_zeroed` with an `ALIGN`-aligned layout gives zeroed memory owned by the caller
// until `dealloc` with the same layout.
unsafe impl Allocator for HostAllocator {
    fn memory(&self) -> Memory {
        Memory::Host
    }

    fn allocate(&self, bytes: u64) -> Result<u64> {
        if bytes == 0 {
            return Err(Error::InvalidArgument {
                what: "bytes",
                reason: "an allocation needs at least one byte".into(),
            });
        }
        let layout = Self::layout(bytes)?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(Error::InvalidArgument {
                what: "bytes",
                reason: format!("the host is out of memory for {bytes} bytes"),
            });
        }
        Ok(p as u64)
    }

    unsafe fn free(&self, addr: u64, bytes: u64) -> Result<()> {
        let layout = Self::layout(bytes)?;
        // SAFETY: the caller guarantees `addr` came from `allocate(bytes)`, i.e. from
        // `alloc_zeroed(layout)`.
        unsafe { std::alloc::dealloc(addr as *mut u8, layout) };
        Ok(())
    }
}

/// A byte range a call reads or writes: an address (device or host, as the call expects) and
/// its length. Made from a `cudarc` buffer, a host slice, or raw parts.
///
/// ```
/// use purlin::memory::Span;
/// let data = [1u32, 2, 3, 4];
/// let span = Span::from_host(&data);
/// assert_eq!(span.bytes, 16);
/// assert_eq!(span.addr, data.as_ptr() as u64);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The first byte's address.
    pub addr: u64,
    /// Bytes in the range.
    pub bytes: u64,
}

impl Span {
    /// A range from raw parts (nothing is checked until a call uses it).
    ///
    /// ```
    /// let s = purlin::memory::Span::new(0x1000, 64);
    /// assert_eq!((s.addr, s.bytes), (0x1000, 64));
    /// ```
    pub const fn new(addr: u64, bytes: u64) -> Self {
        Self { addr, bytes }
    }

    /// The bytes of a host slice (for the CPU emulation).
    ///
    /// ```
    /// let v = vec![0f32; 8];
    /// assert_eq!(purlin::memory::Span::from_host(&v).bytes, 32);
    /// ```
    pub fn from_host<T>(data: &[T]) -> Self {
        Self::new(data.as_ptr() as u64, std::mem::size_of_val(data) as u64)
    }

    /// The bytes of a device buffer.
    ///
    /// ```no_run
    /// let gpu = purlin::Gpu::open(0)?;
    /// let stream = gpu.new_stream()?;
    /// let buf = stream.alloc_zeros::<f32>(256)?;
    /// let span = purlin::memory::Span::from_device(&buf, &stream);
    /// assert_eq!(span.bytes, 1024);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn from_device<T>(
        buf: &impl cudarc::driver::DevicePtr<T>,
        stream: &cudarc::driver::CudaStream,
    ) -> Self {
        let bytes = cudarc::driver::DeviceSlice::num_bytes(buf) as u64;
        // Purlin disables cudarc's event tracking, so the guard records nothing.
        let (addr, _guard) = buf.device_ptr(stream);
        Self::new(addr, bytes)
    }

    /// The sub-range `offset..offset + bytes`, if it lies inside this one.
    ///
    /// ```
    /// let s = purlin::memory::Span::new(0x1000, 64);
    /// assert_eq!(s.slice(16, 16), Some(purlin::memory::Span::new(0x1010, 16)));
    /// assert_eq!(s.slice(60, 16), None);
    /// ```
    pub fn slice(&self, offset: u64, bytes: u64) -> Option<Span> {
        let end = offset.checked_add(bytes)?;
        (end <= self.bytes).then(|| Span::new(self.addr + offset, bytes))
    }
}
