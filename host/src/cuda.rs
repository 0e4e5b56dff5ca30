//! The raw driver calls the shim needs beyond cudarc's safe API (peer access, IPC, stream
//! memory operations), each status checked.

use crate::error::{Error, Result};
use crate::gpu::Gpu;
use cudarc::driver::sys::{self, CUresult};
use cudarc::driver::{CudaContext, result};
use std::mem::MaybeUninit;
use std::sync::Arc;

/// Bytes of a CUDA IPC memory handle.
pub(crate) const IPC_HANDLE_BYTES: usize = 64;

/// The 16-byte UUID of device `ordinal`.
pub(crate) fn device_uuid(ordinal: usize) -> Result<[u8; 16]> {
    let dev = result::device::get(ordinal as i32)?;
    let uuid = result::device::get_uuid(dev)?;
    Ok(uuid.bytes.map(|b| b as u8))
}

/// The ordinal of the device with this UUID, if this process can see it.
pub(crate) fn ordinal_of_uuid(uuid: &[u8; 16]) -> Result<Option<usize>> {
    for ordinal in 0..result::device::get_count()? as usize {
        if device_uuid(ordinal)? == *uuid {
            return Ok(Some(ordinal));
        }
    }
    Ok(None)
}

/// Whether device `from` can access the memory of device `to` (`cuDeviceCanAccessPeer`).
pub(crate) fn can_access_peer(from: usize, to: usize) -> Result<bool> {
    if from == to {
        return Ok(true);
    }
    let (a, b) = (
        result::device::get(from as i32)?,
        result::device::get(to as i32)?,
    );
    let mut can = 0;
    // SAFETY: `can` is a valid out-pointer; both devices exist.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) }.result()?;
    Ok(can != 0)
}

/// Lets `gpu`'s context access the memory of GPU `peer` (idempotent; never disabled: other
/// users of the primary contexts may rely on it).
pub(crate) fn enable_peer_access(gpu: &Gpu, peer: usize) -> Result<()> {
    if gpu.ordinal() == peer {
        return Ok(());
    }
    if !can_access_peer(gpu.ordinal(), peer)? {
        return Err(Error::PeerUnreachable {
            from: gpu.ordinal(),
            to: peer,
        });
    }
    let peer_ctx = CudaContext::new(peer)?;
    gpu.context().bind_to_thread()?;
    // SAFETY: both contexts are live; flags must be 0.
    match unsafe { sys::cuCtxEnablePeerAccess(peer_ctx.cu_ctx(), 0) } {
        CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
        CUresult::CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => Err(Error::PeerUnreachable {
            from: gpu.ordinal(),
            to: peer,
        }),
        e => Err(result::DriverError(e).into()),
    }
}

/// An IPC handle for the allocation containing `addr`, and `addr`'s offset in it.
pub(crate) fn ipc_export(gpu: &Gpu, addr: u64) -> Result<([u8; IPC_HANDLE_BYTES], u64)> {
    gpu.context().bind_to_thread()?;
    let (mut base, mut size) = (0, 0);
    // SAFETY: valid out-pointers; `addr` is a device address of this context.
    unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, addr) }.result()?;
    let mut handle = MaybeUninit::<sys::CUipcMemHandle>::uninit();
    // SAFETY: `base` is the base of a device allocation; `handle` is a valid out-pointer.
    unsafe { sys::cuIpcGetMemHandle(handle.as_mut_ptr(), base) }.result()?;
    // SAFETY: initialised by the successful call above.
    let handle = unsafe { handle.assume_init() };
    Ok((handle.reserved.map(|b| b as u8), addr - base))
}

/// Maps a peer process's allocation into `gpu`'s context; returns the base address (close it
/// with [`ipc_close`]).
pub(crate) fn ipc_open(gpu: &Gpu, handle: &[u8; IPC_HANDLE_BYTES]) -> Result<u64> {
    gpu.context().bind_to_thread()?;
    let handle = sys::CUipcMemHandle {
        reserved: handle.map(|b| b as _),
    };
    let mut base = 0;
    // SAFETY: valid out-pointer; the handle came from `cuIpcGetMemHandle` in another process.
    unsafe {
        sys::cuIpcOpenMemHandle_v2(
            &mut base,
            handle,
            sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
        )
    }
    .result()?;
    Ok(base)
}

/// Unmaps what [`ipc_open`] mapped.
///
/// # Safety
/// `base` came from `ipc_open` on this GPU and nothing uses the mapping any more.
pub(crate) unsafe fn ipc_close(gpu: &Gpu, base: u64) -> Result<()> {
    gpu.context().bind_to_thread()?;
    // SAFETY: forwarded contract.
    unsafe { sys::cuIpcCloseMemHandle(base) }.result()?;
    Ok(())
}

/// Stream-ordered store of `value` to the `u64` at `addr`, after a fence that makes the
/// stream's earlier writes visible system-wide first (release semantics).
///
/// # Safety
/// `addr` is an 8-byte aligned device address this stream's device can write.
pub(crate) unsafe fn stream_write_u64(
    stream: &cudarc::driver::CudaStream,
    addr: u64,
    value: u64,
) -> Result<()> {
    stream.context().bind_to_thread()?;
    // SAFETY: forwarded contract; flags 0 = with the memory barrier.
    unsafe { sys::cuStreamWriteValue64_v2(stream.cu_stream(), addr, value, 0) }.result()?;
    Ok(())
}

/// Page-locked host memory: the bounce buffer of device-to-host reads. Reads into pageable
/// memory go through the driver's one staging buffer per context and block the calling thread
/// inside the copy; with several ranks on one GPU (threads of one process), a read queued behind
/// a stream wait would then stall every other rank's pageable copy — the very copies that would
/// end the wait. Reads through pinned memory return at once and wait in `cuStreamSynchronize`.
#[derive(Debug)]
pub(crate) struct Pinned {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the buffer is owned by this value; the pointer is used only through `&mut self`.
unsafe impl Send for Pinned {}

impl Pinned {
    /// The most a read bounces at once.
    pub(crate) const MAX: usize = 4 << 20;

    pub(crate) fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        ctx.bind_to_thread()?;
        // SAFETY: the context is current; `len > 0`.
        let ptr = unsafe { result::malloc_host(len.max(1), 0) }? as *mut u8;
        Ok(Self {
            ptr,
            len: len.max(1),
            ctx: ctx.clone(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let freed = self.ctx.bind_to_thread().and_then(|()| {
            // SAFETY: allocated by `malloc_host` in `new`; nothing reads it any more (every read
            // waited for its copy).
            unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) }
        });
        if let Err(e) = freed {
            tracing::warn!(%e, "freeing a pinned bounce buffer failed");
        }
    }
}

/// Copies `dst.len()` bytes from device address `src` through `stream` (ordered after the
/// stream's earlier work), bouncing through `pinned`, and waits.
///
/// # Safety
/// `src` is a device address valid for `dst.len()` bytes.
pub(crate) unsafe fn read_bytes(
    stream: &cudarc::driver::CudaStream,
    src: u64,
    dst: &mut [u8],
    pinned: &mut Pinned,
) -> Result<()> {
    stream.context().bind_to_thread()?;
    for (i, piece) in dst.chunks_mut(pinned.len).enumerate() {
        // SAFETY: `pinned` owns `len >= piece.len()` bytes, borrowed mutably.
        let bounce = unsafe { std::slice::from_raw_parts_mut(pinned.ptr, piece.len()) };
        let from = src + (i * pinned.len) as u64;
        // SAFETY: `bounce` outlives the copy, which is waited for before it is read.
        unsafe { result::memcpy_dtoh_async(bounce, from, stream.cu_stream()) }?;
        stream.synchronize()?;
        piece.copy_from_slice(bounce);
    }
    Ok(())
}
