#!/usr/bin/env python3
"""Which driver calls block the host while a kernel of another stream is still running.

On the virtual node every rank is a thread of one process on one GPU, and a rank's kernel waits
for its peers' launches: a driver call that waits for the device to go idle, made by a rank's
thread before its next launch, leaves the peers waiting until their timeout. This probe keeps a
spinning kernel (torch.cuda._sleep, about SPIN_S seconds) running on one stream and times each
candidate call made from the host meanwhile on another stream. A call that takes about as long
as the spin waited for it.

    python3 scripts/probe-blocking.py [CUBIN]   # CUBIN: a module to load (gpu-bundle/cubin/...)

Prints one line per call: its host time and whether it waited for the spinning kernel.
"""
import ctypes
import sys
import time

import torch

SPIN_S = 1.0
cuda = ctypes.CDLL("libcuda.so.1")
for name in ("cuMemAllocAsync", "cuMemFreeAsync", "cuMemcpyHtoDAsync_v2", "cuMemAlloc_v2",
             "cuMemFree_v2", "cuMemHostAlloc", "cuMemFreeHost", "cuStreamCreate",
             "cuEventCreate", "cuModuleLoadData", "cuModuleGetFunction", "cuFuncIsLoaded",
             "cuFuncLoad", "cuFuncSetAttribute", "cuStreamSynchronize", "cuMemsetD8Async"):
    getattr(cuda, name).restype = ctypes.c_int


def check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: CUresult {rc}")


torch.cuda.init()
torch.zeros(1, device="cuda")
spin_stream = torch.cuda.Stream()
other = torch.cuda.Stream()
h_other = ctypes.c_void_p(other.cuda_stream)
clock_hz = torch.cuda.clock_rate() * 1e6 if hasattr(torch.cuda, "clock_rate") else 1.98e9
cycles = int(SPIN_S * clock_hz)


def spinning(label, call):
    """Runs `call` on the host while a kernel spins on spin_stream; prints how long it took."""
    torch.cuda.synchronize()
    with torch.cuda.stream(spin_stream):
        torch.cuda._sleep(cycles)
    time.sleep(0.05)  # the spin kernel is running now
    start = time.perf_counter()
    call()
    took = time.perf_counter() - start
    left_running = spin_stream.query() is False
    torch.cuda.synchronize()
    verdict = "WAITED for the running kernel" if took > SPIN_S / 2 else "does not wait"
    print(f"{label:<52} {took * 1e3:9.2f} ms  {verdict}{'' if left_running else ' (spin ended)'}")
    return took


def alloc_async(nbytes):
    p = ctypes.c_uint64()
    check(cuda.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(nbytes), h_other), "alloc")
    return p


pool_ptrs = []
# The first stream-ordered allocation of the process, then growth of the pool.
spinning("cuMemAllocAsync 512 MiB (first of the process)",
         lambda: pool_ptrs.append(alloc_async(512 << 20)))
spinning("cuMemAllocAsync 512 MiB (pool grows)", lambda: pool_ptrs.append(alloc_async(512 << 20)))
spinning("cuMemAllocAsync 64 KiB", lambda: pool_ptrs.append(alloc_async(64 << 10)))
spinning("cuMemFreeAsync 512 MiB",
         lambda: check(cuda.cuMemFreeAsync(pool_ptrs.pop(0), h_other), "free async"))
spinning("cuMemAllocAsync 512 MiB (after a free)", lambda: pool_ptrs.append(alloc_async(512 << 20)))

pinned = torch.empty(64 << 20, dtype=torch.uint8, pin_memory=True)
pageable = bytearray(64 << 20)
dst = pool_ptrs[0]
spinning("cuMemcpyHtoDAsync 64 MiB from pinned memory",
         lambda: check(cuda.cuMemcpyHtoDAsync_v2(dst, ctypes.c_void_p(pinned.data_ptr()),
                                                  ctypes.c_size_t(64 << 20), h_other), "copy"))
buf = (ctypes.c_char * len(pageable)).from_buffer(pageable)
spinning("cuMemcpyHtoDAsync 64 MiB from pageable memory",
         lambda: check(cuda.cuMemcpyHtoDAsync_v2(dst, buf, ctypes.c_size_t(64 << 20), h_other),
                       "copy"))
small = (ctypes.c_char * 4096)()
spinning("cuMemcpyHtoDAsync 4 KiB from pageable memory",
         lambda: check(cuda.cuMemcpyHtoDAsync_v2(dst, small, ctypes.c_size_t(4096), h_other),
                       "copy"))
spinning("cuMemsetD8Async 64 MiB",
         lambda: check(cuda.cuMemsetD8Async(dst, 0, ctypes.c_size_t(64 << 20), h_other), "set"))

dev = ctypes.c_uint64()
spinning("cuMemAlloc 256 MiB", lambda: check(cuda.cuMemAlloc_v2(ctypes.byref(dev),
                                                                ctypes.c_size_t(256 << 20)), "a"))
spinning("cuMemFree 256 MiB", lambda: check(cuda.cuMemFree_v2(dev), "free"))
host = ctypes.c_void_p()
spinning("cuMemHostAlloc 64 MiB", lambda: check(cuda.cuMemHostAlloc(ctypes.byref(host),
                                                                    ctypes.c_size_t(64 << 20), 0),
                                                "host alloc"))
spinning("cuMemFreeHost 64 MiB", lambda: check(cuda.cuMemFreeHost(host), "free host"))
s = ctypes.c_void_p()
spinning("cuStreamCreate", lambda: check(cuda.cuStreamCreate(ctypes.byref(s), 1), "stream"))
e = ctypes.c_void_p()
spinning("cuEventCreate", lambda: check(cuda.cuEventCreate(ctypes.byref(e), 2), "event"))

if len(sys.argv) > 1:
    image = open(sys.argv[1], "rb").read()
    module = ctypes.c_void_p()
    spinning("cuModuleLoadData (cubin)",
             lambda: check(cuda.cuModuleLoadData(ctypes.byref(module), image), "load"))
    names = [n.decode() for n in image.split(b"\0") if n.startswith(b"purlin_") and n.isascii()]
    names = sorted(set(n for n in names if n.isidentifier()))
    f = ctypes.c_void_p()
    state = ctypes.c_int()
    for name in names[:40]:
        if cuda.cuModuleGetFunction(ctypes.byref(f), module, name.encode()) == 0:
            break
    else:
        raise RuntimeError("no purlin_ kernel found in the cubin")
    fn = f
    check(cuda.cuFuncIsLoaded(ctypes.byref(state), fn), "is loaded")
    print(f"{name}: after cuModuleGetFunction, loaded state {state.value} (1 = loaded)")
    spinning("cuFuncSetAttribute (max dynamic smem)",
             lambda: check(cuda.cuFuncSetAttribute(fn, 8, 200 * 1024), "attr"))
    check(cuda.cuFuncIsLoaded(ctypes.byref(state), fn), "is loaded")
    print(f"{name}: after cuFuncSetAttribute, loaded state {state.value}")
    f2 = ctypes.c_void_p()
    other_name = next(n for n in names if n != name and
                      cuda.cuModuleGetFunction(ctypes.byref(f2), module, n.encode()) == 0)
    check(cuda.cuFuncIsLoaded(ctypes.byref(state), f2), "is loaded")
    print(f"{other_name}: after cuModuleGetFunction, loaded state {state.value}")
    spinning(f"cuFuncLoad ({other_name})", lambda: check(cuda.cuFuncLoad(f2), "func load"))
    check(cuda.cuFuncIsLoaded(ctypes.byref(state), f2), "is loaded")
    print(f"{other_name}: after cuFuncLoad, loaded state {state.value}")
