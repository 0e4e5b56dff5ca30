//! Device copies of the V collectives' counts. The Python API takes sizes as lists, but
//! Purlin's V kernels read their counts from device memory when they run (so a graph replay
//! can use new counts). Each call stages its counts in a slot of pinned host memory and copies
//! them to the slot's device twin on the call's stream, right before the kernel:
//!
//! - Eager calls take the slots of a ring in turn. A slot is reused only after the kernel that
//!   read it has run (an event recorded after each launch), so neither the pinned source nor
//!   the device copy changes under a call in flight, whichever stream it is on.
//! - Calls being captured into a CUDA graph get a slot of their own for good, found by content:
//!   the graph's copy node reads the pinned slot at every replay, so it must never change.
//!   Capturing the same counts again reuses the slot; [`GRAPH_SLOTS`] distinct lists at most.

use crate::error::{BindingError, Result};
use cudarc::driver::{result, sys};
use purlin::Gpu;
use purlin::memory::{Allocator, DeviceAllocator};
use purlin::purlin_device::context::MAX_RANKS;
use std::collections::HashMap;
use std::sync::Arc;

/// `u64` counts in one slot: enough for AllToAllV at the largest world (send, then receive).
pub const SLOT_WORDS: usize = 2 * MAX_RANKS;
/// Bytes of one slot.
const SLOT_BYTES: usize = SLOT_WORDS * 8;
/// Slots eager calls cycle through.
pub const RING_SLOTS: usize = 64;
/// Slots for calls captured into graphs.
pub const GRAPH_SLOTS: usize = 1024;
const SLOTS: usize = RING_SLOTS + GRAPH_SLOTS;

/// A raw CUDA handle or pointer owned by the arena.
#[derive(Clone, Copy, Debug)]
struct Raw<T>(T);
// SAFETY: CUDA events and pinned host allocations may be used from any thread; the arena is
// only ever used under its handle's mutex.
unsafe impl<T> Send for Raw<T> {}

/// Pinned and device slots for V counts (see the [module docs](self)).
#[derive(Debug)]
pub struct CountsArena {
    gpu: Arc<Gpu>,
    allocator: DeviceAllocator,
    device: u64,
    host: Raw<*mut u64>,
    /// Per ring slot: an event recorded after the launch that last read it.
    events: Vec<Option<Raw<sys::CUevent>>>,
    next: usize,
    graph: HashMap<Vec<u64>, usize>,
}

/// Where a call's counts are, and what to do once its kernel is launched.
#[derive(Clone, Copy, Debug)]
pub struct Staged {
    /// Device address of the counts.
    pub addr: u64,
    /// The ring slot to mark as in use by the launch (eager calls).
    ring_slot: Option<usize>,
}

impl CountsArena {
    /// Allocates the slots on `gpu`.
    pub fn new(gpu: Arc<Gpu>) -> Result<Self> {
        let allocator = DeviceAllocator::new(gpu.clone());
        let device = allocator.allocate((SLOTS * SLOT_BYTES) as u64)?;
        gpu.context().bind_to_thread()?;
        // SAFETY: the context is current; the size is non-zero; freed in `Drop`.
        let host = match unsafe { result::malloc_host(SLOTS * SLOT_BYTES, 0) } {
            Ok(p) => p as *mut u64,
            Err(e) => {
                // SAFETY: just allocated, never used.
                if let Err(f) = unsafe { allocator.free(device, (SLOTS * SLOT_BYTES) as u64) } {
                    tracing::warn!(%f, "freeing the counts after a failed set-up failed");
                }
                return Err(e.into());
            }
        };
        Ok(Self {
            gpu,
            allocator,
            device,
            host: Raw(host),
            events: vec![None; RING_SLOTS],
            next: 0,
            graph: HashMap::new(),
        })
    }

    /// The device address of the slots: aligned, live while the arena is, and never empty (the
    /// V calls pass it as a zero-byte stand-in for an empty tensor's null data pointer).
    pub fn base(&self) -> u64 {
        self.device
    }

    /// Copies `counts` (at most [`SLOT_WORDS`]) to device memory on `stream`, ahead of the
    /// kernel that reads them; call [`launched`](CountsArena::launched) right after queuing
    /// that kernel.
    ///
    /// # Safety
    /// `stream` is a live stream of the arena's GPU.
    pub unsafe fn stage(&mut self, counts: &[u64], stream: sys::CUstream) -> Result<Staged> {
        if counts.len() > SLOT_WORDS {
            return Err(BindingError::Value(format!(
                "{} counts do not fit a slot of {SLOT_WORDS}",
                counts.len()
            )));
        }
        self.gpu.context().bind_to_thread()?;
        // SAFETY: forwarded contract.
        let (slot, ring_slot, fresh) = if unsafe { capturing(stream) }? {
            let (slot, fresh) = self.graph_slot(counts)?;
            (slot, None, fresh)
        } else {
            let slot = self.next;
            self.next = (self.next + 1) % RING_SLOTS;
            if let Some(Raw(event)) = self.events[slot] {
                // SAFETY: an event of this arena, recorded after the last launch that read the
                // slot; waiting for it makes the slot free to rewrite.
                unsafe { result::event::synchronize(event) }?;
            }
            (slot, Some(slot), true)
        };
        // SAFETY: `slot < SLOTS`, so the slot's words lie inside the pinned allocation.
        let at = unsafe { self.host.0.add(slot * SLOT_WORDS) };
        if fresh {
            // SAFETY: no copy in flight reads a fresh slot (ring: waited for above; graph: a
            // slot no call has used), and nothing else references its words.
            unsafe { std::slice::from_raw_parts_mut(at, counts.len()) }.copy_from_slice(counts);
        }
        // SAFETY: inside the pinned allocation (above); a graph slot that is not fresh already
        // holds `counts` and is only read from now on.
        let host = unsafe { std::slice::from_raw_parts(at, counts.len()) };
        let addr = self.device + (slot * SLOT_BYTES) as u64;
        // SAFETY: `addr` holds a slot of device memory of this GPU; `host` is pinned and stays
        // unchanged until the copy has run (see above); the stream is live (contract).
        unsafe { result::memcpy_htod_async(addr, host, stream) }?;
        Ok(Staged { addr, ring_slot })
    }

    /// Marks the ring slot of `staged` as read by the work just queued on `stream`.
    ///
    /// # Safety
    /// `stream` is a live stream of the arena's GPU.
    pub unsafe fn launched(&mut self, staged: Staged, stream: sys::CUstream) -> Result<()> {
        let Some(slot) = staged.ring_slot else {
            return Ok(());
        };
        let event = match self.events[slot] {
            Some(Raw(e)) => e,
            None => {
                let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
                self.events[slot] = Some(Raw(e));
                e
            }
        };
        // SAFETY: a live event of this arena; the stream is live (contract).
        unsafe { result::event::record(event, stream) }?;
        Ok(())
    }

    /// The graph slot holding `counts`, and whether it was claimed now (no captured call used
    /// these counts before).
    fn graph_slot(&mut self, counts: &[u64]) -> Result<(usize, bool)> {
        if let Some(&slot) = self.graph.get(counts) {
            return Ok((slot, false));
        }
        if self.graph.len() == GRAPH_SLOTS {
            return Err(BindingError::Runtime(format!(
                "{GRAPH_SLOTS} different size lists have been captured into CUDA graphs with \
                 this handle, the most it holds: capture fewer distinct V calls, or use a new \
                 handle"
            )));
        }
        let slot = RING_SLOTS + self.graph.len();
        self.graph.insert(counts.to_vec(), slot);
        Ok((slot, true))
    }
}

/// Whether `stream` is being captured into a graph.
///
/// # Safety
/// `stream` is a live stream.
unsafe fn capturing(stream: sys::CUstream) -> Result<bool> {
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a valid out-pointer; the stream is live (contract).
    unsafe { sys::cuStreamIsCapturing(stream, &mut status) }.result()?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

impl Drop for CountsArena {
    fn drop(&mut self) {
        if let Err(e) = self.gpu.context().bind_to_thread() {
            tracing::warn!(%e, "binding the context to free the V counts failed");
        }
        for Raw(event) in self.events.drain(..).flatten() {
            // SAFETY: an event of this arena; waiting first so no launch still reads its slot.
            let r = unsafe { result::event::synchronize(event).and(result::event::destroy(event)) };
            if let Err(e) = r {
                tracing::warn!(%e, "releasing a V counts event failed");
            }
        }
        // SAFETY: allocated in `new`; the owner synchronised its streams before dropping the
        // arena, and the ring's events were waited for above.
        if let Err(e) = unsafe { result::free_host(self.host.0 as *mut std::ffi::c_void) } {
            tracing::warn!(%e, "freeing the pinned V counts failed");
        }
        // SAFETY: as above, for the device twin.
        if let Err(e) = unsafe {
            self.allocator
                .free(self.device, (SLOTS * SLOT_BYTES) as u64)
        } {
            tracing::warn!(%e, "freeing the device V counts failed");
        }
    }
}
