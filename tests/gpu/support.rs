//! What the GPU test files share: the virtual node (every rank a thread of this process on
//! GPU 0), device buffers filled, poisoned and read back, and CUDA-graph capture.

use cudarc::driver::{CudaGraph, CudaSlice, CudaStream, sys};
use purlin::bootstrap::{Bootstrap, InProcess};
use purlin::memory::DeviceAllocator;
use purlin::workspace::{Workspace, WorkspaceRequirements};
use purlin::{Context, Gpu};
use purlin_tests::POISON;
use std::sync::Arc;

/// Runs `body(ctx, stream)` on every rank of a virtual node of `world` ranks on `gpu`.
pub(crate) fn virtual_node<R: Send>(
    gpu: &Arc<Gpu>,
    world: u32,
    req: WorkspaceRequirements,
    body: impl Fn(&mut Context, &Arc<CudaStream>) -> R + Sync,
) -> Vec<R> {
    let body = &body;
    std::thread::scope(|s| {
        let handles: Vec<_> = InProcess::group(world)
            .unwrap()
            .into_iter()
            .map(|b| {
                let gpu = gpu.clone();
                s.spawn(move || {
                    let stream = gpu.new_stream().unwrap();
                    let ws = Workspace::new(&b, DeviceAllocator::new(gpu.clone()), req).unwrap();
                    let mut ctx = Context::new(b.rank(), b.world(), ws, &stream).unwrap();
                    let out = body(&mut ctx, &stream);
                    ctx.finalize().unwrap();
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// [`virtual_node_failures`], failing the test with every message (after the world) if any.
pub(crate) fn assert_every_rank_passes<F: IntoIterator<Item = String> + Send>(
    gpu: &Arc<Gpu>,
    world: u32,
    req: WorkspaceRequirements,
    body: impl Fn(&mut Context, &Arc<CudaStream>) -> F + Sync,
) {
    let failures = virtual_node_failures(gpu, world, req, body);
    assert!(failures.is_empty(), "world {world}: {failures:?}");
}

/// Every rank's messages from [`virtual_node`], for bodies that return what went wrong.
pub(crate) fn virtual_node_failures<F: IntoIterator<Item = String> + Send>(
    gpu: &Arc<Gpu>,
    world: u32,
    req: WorkspaceRequirements,
    body: impl Fn(&mut Context, &Arc<CudaStream>) -> F + Sync,
) -> Vec<String> {
    virtual_node(gpu, world, req, body)
        .into_iter()
        .flatten()
        .collect()
}

/// The graph of what `enqueue` puts on `stream` (thread-local capture), and what it returned.
pub(crate) fn capture_graph<T>(
    stream: &Arc<CudaStream>,
    enqueue: impl FnOnce() -> T,
) -> (CudaGraph, T) {
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let enqueued = enqueue();
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a graph was captured");
    (graph, enqueued)
}

/// `bytes` on the device; at least 16 bytes, so an empty buffer still has an address.
pub(crate) fn upload(stream: &Arc<CudaStream>, bytes: &[u8]) -> CudaSlice<u8> {
    if bytes.is_empty() {
        stream.alloc_zeros::<u8>(16).unwrap()
    } else {
        stream.clone_htod(bytes).unwrap()
    }
}

/// `len` bytes (at least 16) of `POISON` on the device: an output nothing has written yet.
pub(crate) fn poisoned(stream: &Arc<CudaStream>, len: usize) -> CudaSlice<u8> {
    upload(stream, &vec![POISON; len.max(16)])
}

/// The first `len` bytes of `buf`, copied back to the host.
pub(crate) fn download(stream: &Arc<CudaStream>, buf: &CudaSlice<u8>, len: usize) -> Vec<u8> {
    let mut out = stream.clone_dtoh(buf).unwrap();
    out.truncate(len);
    out
}

/// What is wrong with rank `rank`'s output `got`, if it is not `want`: the first byte where
/// they differ.
pub(crate) fn output_differs(rank: usize, got: &[u8], want: &[u8]) -> Option<String> {
    (got != want).then(|| {
        let first = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        format!("rank {rank}: output differs from byte {first}")
    })
}
