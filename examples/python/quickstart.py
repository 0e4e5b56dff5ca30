"""Purlin's Python quickstart: an AllReduce checked against torch, then a bandwidth line.

    torchrun --nproc-per-node <gpus> examples/python/quickstart.py [--bytes 64M] [--iters 20]

Each rank uses GPU ``LOCAL_RANK % device_count``, so more processes than GPUs share them (four
processes on one GPU work: the virtual node). The process group is nccl when every rank has a
GPU of its own and gloo otherwise (Purlin does not use either for its data: it exchanges CUDA
IPC handles once, through the group's store). Exits non-zero if the check fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import purlin


def parse_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def init_pg(device: torch.device, shared: bool) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if not shared and dist.is_nccl_available():
        dist.init_process_group("cpu:gloo,cuda:nccl", rank=rank, world_size=world, device_id=device)
    else:
        # NCCL refuses two ranks on one GPU; gloo does not care.
        dist.init_process_group("gloo", rank=rank, world_size=world)


def agree(ok: bool) -> bool:
    """Whether every rank's check passed (a gloo/nccl AllReduce of the failures)."""
    backend = dist.get_backend()
    device = "cuda" if backend == "nccl" else "cpu"
    flag = torch.tensor([0 if ok else 1], device=device)
    dist.all_reduce(flag)
    return int(flag.item()) == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", default=None, help="AllReduce size for the bandwidth line (K/M/G)")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if "LOCAL_RANK" not in os.environ:
        print("run under torchrun: torchrun --nproc-per-node 2 examples/python/quickstart.py")
        return 2
    local_rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.device_count()
    if gpus == 0:
        print("quickstart: no CUDA device here")
        return 2
    device = torch.device("cuda", local_rank % gpus)
    shared = int(os.environ.get("LOCAL_WORLD_SIZE", world)) > gpus
    torch.cuda.set_device(device)
    init_pg(device, shared)
    rank = dist.get_rank()

    stream = torch.cuda.current_stream(device)
    s = stream.cuda_stream
    major, minor = torch.cuda.get_device_capability(device)
    handle = purlin.initialize(dist.group.WORLD, device, major * 10 + minor, s)

    # The original's check: an fp16 AllReduce of a small tensor.
    t = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], dtype=torch.float16, device=device)
    t_out = torch.empty_like(t)
    purlin.all_reduce(t, t_out, handle, s)
    # And a deterministic bf16 one of distinct inputs, against torch's rank-ordered f32 sum.
    n = 1 << 16
    inputs = [
        (torch.arange(n, dtype=torch.float32) * (r + 1) / n).to(torch.bfloat16) for r in range(world)
    ]
    x = inputs[rank].to(device)
    x_out = torch.empty_like(x)
    purlin.all_reduce(x, x_out, handle, s, reduction_mode=purlin.ReductionMode.DETERMINISTIC)
    stream.synchronize()
    want = inputs[0].float()
    for inp in inputs[1:]:
        want = want + inp.float()
    ok = torch.equal(t_out.cpu(), (t * world).cpu()) and torch.equal(
        x_out.cpu().view(torch.int16), want.to(torch.bfloat16).view(torch.int16)
    )
    all_ok = agree(ok)
    if rank == 0:
        print(t_out)
        print(f"check: all_reduce over {world} ranks ({dist.get_backend()} group, "
              f"{gpus} GPU{'s' if gpus > 1 else ''}): {'ok' if all_ok else 'FAILED'}")

    # Bandwidth: a bf16 AllReduce, each call timed with CUDA events and waited for.
    size = parse_bytes(args.bytes) if args.bytes else (4 << 20 if shared else 256 << 20)
    count = max(1, size // 2)
    big = torch.ones(count, dtype=torch.bfloat16, device=device)
    big_out = torch.empty_like(big)
    times = []
    for i in range(3 + args.iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        purlin.all_reduce(big, big_out, handle, s)
        end.record(stream)
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    seconds = statistics.median(times)
    algbw = count * 2 / seconds / 1e9
    busbw = algbw * 2 * (world - 1) / world
    # Host cost of one small call: the Python call, and the Rust call it wraps.
    tiny = torch.ones(4, device=device)
    tiny_out = torch.empty_like(tiny)
    host = []
    for _ in range(100):
        t0 = time.perf_counter()
        purlin.all_reduce(tiny, tiny_out, handle, s)
        host.append(time.perf_counter() - t0)
        stream.synchronize()
    python_us = statistics.median(host) * 1e6
    rust_us = purlin._native._rust_all_reduce_host_us(tiny, tiny_out, handle, s, 100)
    if rank == 0:
        note = " (ranks share a GPU: their kernels time-slice, so this is no NVLink figure)" if shared else ""
        print(f"bandwidth: all_reduce {count * 2} B bf16 x {world} ranks: {seconds * 1e6:.1f} us, "
              f"algbw {algbw:.2f} GB/s, busbw {busbw:.2f} GB/s{note}")
        print(f"host cost per call (all_reduce, 16 B): python {python_us:.2f} us, "
              f"rust {rust_us:.2f} us")

    purlin.finalize(handle, s)
    stream.synchronize()
    dist.destroy_process_group()
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
