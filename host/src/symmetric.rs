//! [`SymmetricBuffer`]: a typed device buffer allocated on every rank together and mapped in
//! every peer, which the collectives recognise and run in one pass over.

use crate::allocation::Symmetric;
use crate::allocation::registry::Registry;
use crate::context::Context;
use crate::cuda;
use crate::error::{Error, Result};
use crate::memory::{Memory, Span};
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop, sys};
use purlin_device::context::MAX_RANKS;
use std::marker::PhantomData;
use std::sync::Arc;

/// `len` elements of `T` on every rank of a communicator, each rank's copy reachable by every
/// peer (peer access in one process, CUDA IPC across processes), as torch's symmetric memory
/// or NCCL's registered windows. Made collectively ([`SymmetricBuffer::new`] on every rank, in
/// the same order, with the same `len`), freed collectively ([`free`](Self::free) or drop, on
/// every rank).
///
/// It is a cudarc device buffer of the context's stream ([`DevicePtr`], [`DevicePtrMut`]), so
/// the typed collectives take it like a `CudaSlice`, and cudarc copies fill and read it. A
/// collective whose peers' buffers are symmetric — AllGather(V): `dst` (it writes every rank's
/// output), else `src`; AllToAll, ReduceScatter(V): `src`; AllReduce: `src` and `dst` — runs
/// one pass over them instead of through staging: each rank reads its peers' inputs (AllReduce
/// and AllGather: or writes their outputs) itself, every byte read and written once. Every
/// rank must then pass the same buffers (the call digest compares them: a rank that passes
/// other or ordinary buffers faults the call with
/// [`DigestField::Buffers`](purlin_device::snac::DigestField::Buffers)). AllToAllV and the
/// small-message (packet) paths treat it as an ordinary buffer.
///
/// ```no_run
/// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context, SymmetricBuffer};
/// # let b = InProcess::group(1)?.remove(0);
/// # let gpu = purlin::Gpu::open(0)?;
/// # let stream = gpu.new_stream()?;
/// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
/// // On every rank, in the same order:
/// let mut src = SymmetricBuffer::<f32>::new(&ctx, 1 << 20)?;
/// let mut dst = SymmetricBuffer::<f32>::new(&ctx, 1 << 20)?;
/// stream.memcpy_htod(&vec![1.0f32; 1 << 20], &mut src)?;
/// purlin::all_reduce(&ctx, &src, &mut dst, 1 << 20, purlin::ReduceOpKind::Sum)?;
/// let sum: Vec<f32> = stream.clone_dtoh(&dst)?;
/// src.free()?;
/// dst.free()?;
/// # Ok::<(), purlin::Error>(())
/// ```
#[derive(Debug)]
pub struct SymmetricBuffer<T> {
    /// The allocation (data, then the peer table); `None` once released.
    sym: Option<Symmetric>,
    base: u64,
    len: usize,
    table: u64,
    id: u32,
    registry: Arc<Registry>,
    stream: Arc<CudaStream>,
    _elements: PhantomData<T>,
}

/// Alignment of the peer table after the data.
const TABLE_ALIGN: u64 = 256;

impl<T> SymmetricBuffer<T> {
    /// Allocates `len` elements on every rank of `ctx`'s communicator through its workspace's
    /// allocator, maps every peer's copy and writes this rank's table of them (on the
    /// context's stream, which it then synchronises: the table is there before any kernel on
    /// any stream reads it). A collective call: every rank makes it,
    /// in the same order relative to its other symmetric allocations, with the same `len`
    /// (a different `len` is [`Error::InvalidArgument`] on every rank). Needs a GPU context
    /// (a host-memory context is [`Error::Unsupported`]: its collectives do not run).
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context, SymmetricBuffer};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// let buf = SymmetricBuffer::<half::bf16>::new(&ctx, 4096)?;
    /// assert_eq!(cudarc::driver::DeviceSlice::len(&buf), 4096);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn new(ctx: &Context, len: usize) -> Result<Self> {
        let stream = ctx
            .stream()
            .ok_or_else(|| {
                Error::Unsupported(
                    "symmetric buffers on a host-memory context (its collectives do not run)"
                        .into(),
                )
            })?
            .clone();
        let too_big = || Error::InvalidArgument {
            what: "len",
            reason: format!(
                "{len} elements of {} bytes overflow a symmetric allocation",
                std::mem::size_of::<T>()
            ),
        };
        let bytes = (len as u64).checked_mul(std::mem::size_of::<T>() as u64);
        // Every rank learns every rank's size first, so that all of them refuse a size that
        // differs (the allocation below would round small differences away) or overflows.
        let ws = ctx.workspace();
        let sizes = ws
            .bootstrap()
            .all_gather(&bytes.unwrap_or(u64::MAX).to_le_bytes())?;
        let bytes = bytes.ok_or_else(too_big)?;
        for (r, theirs) in sizes.iter().enumerate() {
            let theirs = theirs
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or_else(|| Error::Bootstrap(format!("rank {r} sent no size")))?;
            if theirs == u64::MAX {
                return Err(Error::PeerFailed {
                    rank: r as u32,
                    step: "symmetric buffer size",
                });
            }
            if theirs != bytes {
                return Err(Error::InvalidArgument {
                    what: "len",
                    reason: format!(
                        "rank {r} asked for {theirs} bytes and rank {} for {bytes}: a symmetric \
                         buffer needs the same size on every rank",
                        ctx.rank()
                    ),
                });
            }
        }
        let table_at = bytes
            .checked_add(TABLE_ALIGN - 1)
            .map(|b| b & !(TABLE_ALIGN - 1))
            .ok_or_else(too_big)?;
        let total = table_at
            .checked_add((MAX_RANKS * 8) as u64)
            .ok_or_else(too_big)?;
        let mut sym = Symmetric::new(ws.bootstrap().clone(), ws.allocator().clone(), total)?;
        let base = sym.local();
        let table = base + table_at;
        let written = (|| -> Result<()> {
            if !matches!(sym.memory(), Memory::Device { .. }) {
                return Err(Error::Unsupported(
                    "symmetric buffers in host memory (the workspace's allocator)".into(),
                ));
            }
            for (r, addr) in sym.addrs.iter().enumerate() {
                // SAFETY: the table's `MAX_RANKS >= world` 8-byte slots lie in this rank's
                // allocation, 8-byte aligned, on the stream's GPU (the workspace's).
                unsafe { cuda::stream_write_u64(&stream, table + 8 * r as u64, *addr)? };
            }
            // Written before any kernel can read it, whatever stream the context uses later.
            stream.synchronize()?;
            Ok(())
        })();
        // Every rank registers the buffer, or none: its number must be the same everywhere.
        if let Err(e) =
            crate::allocation::agree(&**ws.bootstrap(), written, "symmetric buffer table")
        {
            if let Err(r) = sym.release() {
                tracing::warn!(%r, "releasing a symmetric buffer after a failed setup failed");
            }
            return Err(e);
        }
        let registry = ctx.symmetric_buffers().clone();
        let id = registry.add(base, bytes, table);
        Ok(Self {
            sym: Some(sym),
            base,
            len,
            table,
            id,
            registry,
            stream,
            _elements: PhantomData,
        })
    }

    /// This rank's copy.
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context, SymmetricBuffer};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// let buf = SymmetricBuffer::<f32>::new(&ctx, 10)?;
    /// assert_eq!(buf.local().bytes, 40);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn local(&self) -> Span {
        Span::new(self.base, (self.len * std::mem::size_of::<T>()) as u64)
    }

    /// Rank `rank`'s copy, as this rank addresses it (for kernels of your own).
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context, SymmetricBuffer};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// let buf = SymmetricBuffer::<f32>::new(&ctx, 10)?;
    /// assert_eq!(buf.peer(0)?, buf.local());
    /// assert!(buf.peer(1).is_err());
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn peer(&self, rank: u32) -> Result<Span> {
        let sym = self.sym.as_ref().ok_or_else(released)?;
        let addr = sym.addrs.get(rank as usize).ok_or(Error::RankOutOfRange {
            rank,
            world: sym.addrs.len() as u32,
        })?;
        Ok(Span::new(*addr, self.local().bytes))
    }

    /// What a fused kernel puts in `SnacArgs::src_peers` (or `dst_peers`) for this buffer:
    /// the device address of this rank's table of every rank's copy.
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context, SymmetricBuffer};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// let buf = SymmetricBuffer::<f32>::new(&ctx, 10)?;
    /// assert_eq!(buf.peer_table() % 256, 0);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn peer_table(&self) -> u64 {
        self.table
    }

    /// The buffer's number, the same on every rank: what a fused kernel puts in
    /// `SnacArgs::buffers` (the `src` buffer's number; AllReduce: `src | dst << 32`).
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context, SymmetricBuffer};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// let (a, b) = (SymmetricBuffer::<f32>::new(&ctx, 10)?, SymmetricBuffer::<f32>::new(&ctx, 10)?);
    /// assert_eq!(b.id(), a.id() + 1);
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Frees the buffer on every rank (a collective call): the collectives stop recognising it,
    /// the stream is synchronised (every queued call that uses it has run; its exit meeting
    /// means no peer still touches this rank's copy either), then every rank unmaps its peers'
    /// copies and, once all have, frees its own. Every step runs even if one fails; the first
    /// failure is returned.
    ///
    /// ```no_run
    /// # use purlin::{bootstrap::*, memory::DeviceAllocator, workspace::*, Context, SymmetricBuffer};
    /// # let b = InProcess::group(1)?.remove(0);
    /// # let gpu = purlin::Gpu::open(0)?;
    /// # let stream = gpu.new_stream()?;
    /// # let ctx = Context::new(0, 1, Workspace::new(&b, DeviceAllocator::new(gpu), WorkspaceRequirements::small())?, &stream)?;
    /// SymmetricBuffer::<f32>::new(&ctx, 10)?.free()?;
    /// # Ok::<(), purlin::Error>(())
    /// ```
    pub fn free(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        let Some(mut sym) = self.sym.take() else {
            return Ok(());
        };
        self.registry.remove(self.id);
        let synced = self.stream.synchronize().map_err(Error::from);
        let released = sym.release();
        synced.and(released)
    }
}

fn released() -> Error {
    Error::InvalidArgument {
        what: "symmetric buffer",
        reason: "already freed".into(),
    }
}

impl<T> Drop for SymmetricBuffer<T> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::error!(%e, "freeing a symmetric buffer in drop failed");
        }
    }
}

impl<T> DeviceSlice<T> for SymmetricBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

/// Stream-ordered like every buffer of the context's stream: Purlin turns cudarc's event
/// tracking off (see [`crate::Gpu`]), so there is nothing to record.
impl<T> DevicePtr<T> for SymmetricBuffer<T> {
    fn device_ptr<'a>(&'a self, _: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.base, SyncOnDrop::Sync(None))
    }
}

impl<T> DevicePtrMut<T> for SymmetricBuffer<T> {
    fn device_ptr_mut<'a>(&'a mut self, _: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        (self.base, SyncOnDrop::Sync(None))
    }
}
