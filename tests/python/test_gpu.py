"""GPU tests of the Python package, run by every rank under torchrun:

    torchrun --nproc-per-node 2 -m pytest tests/python/test_gpu.py -q
    torchrun --nproc-per-node 4 -m pytest tests/python/test_gpu.py -q

Ranks use GPU ``LOCAL_RANK % device_count``, so all of them may share one GPU. The process
group is gloo (it works however ranks and GPUs are paired, and gives torch's own CPU results
to compare with). Every test makes the same Purlin calls on every rank in the same order; an
assertion on one rank never skips a call on it. Skipped without torch, CUDA or torchrun.

Every collective and dtype is compared with what torch computes: the inputs of all ranks
gathered by torch.distributed, reduced by torch in f32 in rank order — which the deterministic
mode must match bit for bit, having the same order and one rounding.
"""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import purlin  # noqa: E402

pytestmark = [
    pytest.mark.skipif("RANK" not in os.environ, reason="run under torchrun"),
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

Mode = purlin.ReductionMode
REDUCIBLE = [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
COPYABLE = [torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.bool, torch.float8_e4m3fn]


class Env:
    def __init__(self):
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        self.device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(self.device)
        if not dist.is_initialized():
            dist.init_process_group("gloo", rank=self.rank, world_size=self.world)
        major, minor = torch.cuda.get_device_capability(self.device)
        self.arch = major * 10 + minor
        self.stream = torch.cuda.current_stream(self.device)
        self.s = self.stream.cuda_stream
        self.handle = purlin.initialize(dist.group.WORLD, self.device, self.arch, self.s)

    def sync(self):
        self.stream.synchronize()


@pytest.fixture(scope="session")
def env():
    e = Env()
    yield e
    purlin.finalize(e.handle, e.s)
    dist.barrier()


# --- inputs and torch's results -------------------------------------------------------------


def make(rank: int, n: int, dtype, seed: int, device):
    """Rank `rank`'s input of `n` elements: small values, so fp8 sums neither saturate nor lose
    the test's meaning; the same on every rank that makes it."""
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype == torch.bool:
        x = torch.randint(0, 2, (n,), generator=g).bool()
    elif not dtype.is_floating_point:
        x = torch.randint(0, 100, (n,), generator=g).to(dtype)
    else:
        scale = 2.0 if dtype in FP8 else 4.0
        x = ((torch.rand(n, generator=g) - 0.5) * scale).to(dtype)
    return x.to(device)


def gathered(env: Env, x):
    """Every rank's `x` (all the same size), gathered by torch.distributed."""
    b = x.contiguous().view(torch.uint8).cpu()
    parts = [torch.empty_like(b) for _ in range(env.world)]
    dist.all_gather(parts, b)
    return [p.view(x.dtype) for p in parts]


def reduce_ref(parts, dtype, op=purlin.ReduceOp.SUM):
    """torch's reduction of `parts` in f32, in rank order, rounded once to `dtype`."""
    acc = parts[0].float()
    for p in parts[1:]:
        p = p.float()
        if op == purlin.ReduceOp.SUM:
            acc = acc + p
        elif op == purlin.ReduceOp.MAX:
            acc = torch.maximum(acc, p)
        elif op == purlin.ReduceOp.MIN:
            acc = torch.minimum(acc, p)
        else:
            acc = acc * p
    return acc.to(dtype)


def bits(x):
    return x.contiguous().view(torch.uint8).cpu()


#: (rtol, atol) for the non-deterministic mode: a rounding step or two of the dtype.
TOLERANCE = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float8_e4m3fn: (0.15, 0.15),
    torch.float8_e5m2: (0.3, 0.5),
}


def check(got, want, mode):
    """Deterministic: bit for bit torch's rank-ordered f32 result; otherwise within a rounding
    step or two."""
    got, want = got.cpu(), want.cpu()
    if mode == Mode.DETERMINISTIC:
        assert torch.equal(bits(got), bits(want)), "not bitwise equal to torch's rank-ordered f32 result"
    else:
        rtol, atol = TOLERANCE[want.dtype]
        torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol)


# --- every collective and dtype against torch -----------------------------------------------


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", REDUCIBLE, ids=str)
@pytest.mark.parametrize("n", [1000, 1 << 20], ids=["small", "large"])
def test_all_reduce(env, dtype, mode, n):
    x = make(env.rank, n, dtype, 1, env.device)
    out = torch.empty_like(x)
    purlin.all_reduce(x, out, env.handle, env.s, reduction_mode=mode)
    env.sync()
    check(out, reduce_ref(gathered(env, x), dtype), mode)


def test_all_reduce_in_place_and_matches_dist_all_reduce(env):
    x = make(env.rank, 4096, torch.float32, 2, env.device)
    ref = x.cpu()
    dist.all_reduce(ref)  # torch's own AllReduce (gloo)
    purlin.all_reduce(x, x, env.handle, env.s)
    env.sync()
    torch.testing.assert_close(x.cpu(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [purlin.ReduceOp.MAX, purlin.ReduceOp.MIN, purlin.ReduceOp.PROD], ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_all_reduce_other_operators(env, op, dtype):
    x = make(env.rank, 3000, dtype, 3, env.device)
    out = torch.empty_like(x)
    purlin.all_reduce(x, out, env.handle, env.s, Mode.DETERMINISTIC, op=op)
    env.sync()
    check(out, reduce_ref(gathered(env, x), dtype, op), Mode.DETERMINISTIC)


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", REDUCIBLE, ids=str)
def test_reduce_scatter(env, dtype, mode):
    part = 5000
    x = make(env.rank, part * env.world, dtype, 4, env.device)
    out = torch.empty(part, dtype=dtype, device=env.device)
    purlin.reduce_scatter(x, out, env.handle, env.s, reduction_mode=mode)
    env.sync()
    want = reduce_ref(gathered(env, x), dtype)[env.rank * part:(env.rank + 1) * part]
    check(out, want, mode)


@pytest.mark.parametrize("dtype", COPYABLE, ids=str)
@pytest.mark.parametrize("n", [8, 12345, 1 << 19], ids=["tiny", "odd", "large"])
def test_all_gather(env, dtype, n):
    x = make(env.rank, n, dtype, 5, env.device)
    out = torch.empty(n * env.world, dtype=dtype, device=env.device)
    purlin.all_gather(x, out, env.handle, env.s)
    env.sync()
    assert torch.equal(bits(out), bits(torch.cat(gathered(env, x))))


@pytest.mark.parametrize("dtype", COPYABLE, ids=str)
def test_all_to_all(env, dtype):
    part = 777 * 16 // max(1, torch.empty((), dtype=dtype).element_size())
    x = make(env.rank, part * env.world, dtype, 6, env.device)
    out = torch.empty_like(x)
    purlin.all_to_all(x, out, env.handle, env.s)
    env.sync()
    parts = gathered(env, x)
    want = torch.cat([parts[p][env.rank * part:(env.rank + 1) * part] for p in range(env.world)])
    assert torch.equal(bits(out), bits(want))


def v_sizes(world, seed, elem, zero_rank=None):
    """Uneven per-rank sizes in bytes (whole elements; odd counts too); one rank may send 0."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, 3000, (world,), generator=g).tolist()
    if zero_rank is not None:
        counts[zero_rank % world] = 0
    return [c * elem for c in counts]


@pytest.mark.parametrize("dtype", COPYABLE, ids=str)
def test_all_gather_v(env, dtype):
    elem = torch.empty((), dtype=dtype).element_size()
    sizes = v_sizes(env.world, 7, elem, zero_rank=1)
    xs = [make(r, sizes[r] // elem, dtype, 7, env.device) for r in range(env.world)]
    out = torch.empty(sum(sizes) // elem, dtype=dtype, device=env.device)
    purlin.all_gather_v(xs[env.rank], out, sizes, env.handle, env.s)
    env.sync()
    assert torch.equal(bits(out), bits(torch.cat(xs)))


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.name)
@pytest.mark.parametrize("dtype", REDUCIBLE, ids=str)
def test_reduce_scatter_v(env, dtype, mode):
    elem = torch.empty((), dtype=dtype).element_size()
    sizes = v_sizes(env.world, 8, elem, zero_rank=0)
    total = sum(sizes) // elem
    x = make(env.rank, total, dtype, 8, env.device)
    out = torch.empty(sizes[env.rank] // elem, dtype=dtype, device=env.device)
    purlin.reduce_scatter_v(x, out, sizes, env.handle, env.s, reduction_mode=mode)
    env.sync()
    start = sum(sizes[:env.rank]) // elem
    want = reduce_ref(gathered(env, x), dtype)[start:start + sizes[env.rank] // elem]
    check(out, want, mode)


@pytest.mark.parametrize("dtype", COPYABLE, ids=str)
def test_all_to_all_v(env, dtype):
    elem = torch.empty((), dtype=dtype).element_size()
    g = torch.Generator().manual_seed(9)
    # sent[p][q]: elements rank p sends to rank q (some zero).
    sent = (torch.randint(0, 1500, (env.world, env.world), generator=g) * (torch.rand(env.world, env.world, generator=g) > 0.2)).tolist()
    mine = sent[env.rank]
    recv = [sent[p][env.rank] for p in range(env.world)]
    xs = {p: make(p, sum(sent[p]), dtype, 9, env.device) for p in range(env.world)}
    out = torch.empty(sum(recv), dtype=dtype, device=env.device)
    splits = [c * elem for c in mine] + [c * elem for c in recv]
    purlin.all_to_all_v(xs[env.rank], out, splits, env.handle, env.s)
    env.sync()
    want = torch.cat([xs[p][sum(sent[p][:env.rank]):sum(sent[p][:env.rank + 1])] for p in range(env.world)])
    assert torch.equal(bits(out), bits(want))


def test_zero_sizes(env):
    e = torch.empty(0, device=env.device)
    purlin.all_reduce(e, torch.empty_like(e), env.handle, env.s)
    purlin.all_gather(e, torch.empty(0, device=env.device), env.handle, env.s)
    purlin.all_gather_v(e, torch.empty(0, device=env.device), [0] * env.world, env.handle, env.s)
    env.sync()


# --- deterministic mode, streams, graphs ----------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_deterministic_mode_is_bitwise_repeatable(env, dtype):
    x = make(env.rank, (1 << 20) + 37, dtype, 10, env.device)
    runs = []
    for _ in range(4):
        out = torch.full_like(x, float("nan"))
        purlin.all_reduce(x, out, env.handle, env.s, Mode.DETERMINISTIC)
        env.sync()
        runs.append(bits(out))
    assert all(torch.equal(r, runs[0]) for r in runs[1:])
    xs = make(env.rank, 4096 * env.world, dtype, 11, env.device)
    shards = []
    for _ in range(3):
        out = torch.empty(4096, dtype=dtype, device=env.device)
        purlin.reduce_scatter(xs, out, env.handle, env.s, Mode.DETERMINISTIC)
        env.sync()
        shards.append(bits(out))
    assert all(torch.equal(r, shards[0]) for r in shards[1:])


def test_calls_run_on_the_stream_they_are_given(env):
    side = torch.cuda.Stream(env.device)
    x = make(env.rank, 65536, torch.float32, 12, env.device)
    out = torch.empty_like(x)
    side.wait_stream(env.stream)
    with torch.cuda.stream(side):
        purlin.all_reduce(x, out, env.handle, side.cuda_stream)
    side.synchronize()
    check(out, reduce_ref(gathered(env, x), torch.float32), Mode.DETERMINISTIC)
    # A torch.cuda.Stream object is accepted as well as its int.
    purlin.all_gather(x, torch.empty(x.numel() * env.world, device=env.device), env.handle, side)
    side.synchronize()
    env.stream.wait_stream(side)


def test_graph_capture_and_replay(env):
    n = 8192
    x = torch.zeros(n, dtype=torch.bfloat16, device=env.device)
    out = torch.empty_like(x)
    elem = 4
    sizes = v_sizes(env.world, 13, elem)
    vin = torch.zeros(sizes[env.rank] // elem, device=env.device)
    vout = torch.empty(sum(sizes) // elem, device=env.device)
    a2a_in = torch.zeros(256 * env.world, device=env.device)
    a2a_out = torch.empty_like(a2a_in)
    capture = torch.cuda.Stream(env.device)

    def calls(s):
        purlin.all_reduce(x, out, env.handle, s, Mode.DETERMINISTIC)
        purlin.all_gather_v(vin, vout, sizes, env.handle, s)
        purlin.all_to_all(a2a_in, a2a_out, env.handle, s)

    # Warm up on the capture stream (every kernel loaded before capture).
    capture.wait_stream(env.stream)
    with torch.cuda.stream(capture):
        calls(capture.cuda_stream)
    capture.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        calls(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    for it in range(3):
        seed = 100 + it
        x.copy_(make(env.rank, n, torch.bfloat16, seed, env.device))
        vs = [make(r, sizes[r] // elem, torch.float32, seed, env.device) for r in range(env.world)]
        vin.copy_(vs[env.rank])
        a2a_in.copy_(make(env.rank, a2a_in.numel(), torch.float32, seed, env.device))
        torch.cuda.synchronize()
        graph.replay()
        torch.cuda.synchronize()
        check(out, reduce_ref(gathered(env, x), torch.bfloat16), Mode.DETERMINISTIC)
        assert torch.equal(vout.cpu(), torch.cat(vs).cpu())
        parts = gathered(env, a2a_in)
        want = torch.cat([p[env.rank * 256:(env.rank + 1) * 256] for p in parts])
        assert torch.equal(a2a_out.cpu(), want)
    del graph


# --- bad inputs -----------------------------------------------------------------------------


def test_bad_inputs_raise_before_anything_runs(env):
    h, s, d = env.handle, env.s, env.device
    x = torch.ones(64, device=d)
    with pytest.raises(ValueError, match="is on cpu"):
        purlin.all_reduce(x.cpu(), x, h, s)
    with pytest.raises(ValueError, match="not contiguous"):
        m = torch.ones(8, 8, device=d).t()
        purlin.all_reduce(m, torch.empty(8, 8, device=d), h, s)
    with pytest.raises(ValueError, match="16-byte aligned"):
        purlin.all_reduce(x[1:], torch.empty(63, device=d), h, s)
    with pytest.raises(TypeError, match="all_reduce reduces"):
        xi = torch.ones(64, dtype=torch.int32, device=d)
        purlin.all_reduce(xi, xi, h, s)
    with pytest.raises(TypeError, match="same dtype"):
        purlin.all_reduce(x, torch.empty(64, dtype=torch.float16, device=d), h, s)
    with pytest.raises(ValueError, match="out_tensor has 32 elements"):
        purlin.all_reduce(x, torch.empty(32, device=d), h, s)
    with pytest.raises(ValueError, match="all_gather writes world"):
        purlin.all_gather(x, x, h, s)
    with pytest.raises(ValueError, match="bytes_list has"):
        purlin.all_gather_v(x, x, [4], h, s)
    with pytest.raises(ValueError, match="reduction_mode must be"):
        purlin.all_reduce(x, x, h, s, reduction_mode=42)
    with pytest.raises(ValueError, match="stream_ptr must be a non-negative int"):
        purlin.all_reduce(x, x, h, -1)
    if torch.cuda.device_count() > 1:
        other = torch.device("cuda", (d.index + 1) % torch.cuda.device_count())
        with pytest.raises(ValueError, match="but the handle was initialized on"):
            purlin.all_reduce(torch.ones(64, device=other), x, h, s)
    # The handle still works after all that.
    out = torch.empty_like(x)
    purlin.all_reduce(x, out, h, s)
    env.sync()
    assert torch.equal(out.cpu(), torch.full((64,), float(env.world)))


def test_a_rank_that_never_initializes_is_a_timeout_error_naming_it(env):
    group = dist.new_group(list(range(env.world)))
    late = env.world - 1
    if env.rank != late:
        with pytest.raises(TimeoutError, match=rf"rank\(s\) {late}\b"):
            purlin.initialize(group, env.device, env.arch, env.s, timeout=3.0)
    dist.barrier()


def test_a_rank_that_skips_a_collective_is_a_timeout_error(env):
    group = dist.new_group(list(range(env.world)))
    handle = purlin.initialize(group, env.device, env.arch, env.s, kernel_timeout=1.0)
    late = env.world - 1
    x = torch.ones(4096, device=env.device)
    if env.rank != late:
        purlin.all_reduce(x, torch.empty_like(x), handle, env.s)
        with pytest.raises((TimeoutError, RuntimeError), match="rank") as raised:
            purlin.synchronize(handle, env.s)
        if env.world == 2:
            # The only peer is the one that never came.
            assert raised.type is TimeoutError
            assert f"rank {late}" in str(raised.value)
        with pytest.raises(RuntimeError, match="faulted earlier"):
            purlin.all_reduce(x, torch.empty_like(x), handle, env.s)
    dist.barrier()
    purlin.finalize(handle, env.s)
    assert handle.finalized


def test_finalize_is_idempotent_and_a_finalized_handle_refuses_work(env):
    group = dist.new_group(list(range(env.world)))
    handle = purlin.initialize(group, env.device, env.arch, env.s)
    assert (handle.rank, handle.world) == (env.rank, env.world)
    purlin.finalize(handle, env.s)
    purlin.finalize(handle, env.s)
    x = torch.ones(16, device=env.device)
    with pytest.raises(RuntimeError, match="finalized"):
        purlin.all_reduce(x, x, handle, env.s)


# --- the binding's cost ---------------------------------------------------------------------


def test_host_cost_per_call(env):
    """Host time of one small AllReduce call: the Python call against the Rust call on the
    same tensors (written to $PURLIN_PY_RESULTS when set)."""
    x = torch.ones(4, device=env.device)  # 16 bytes
    out = torch.empty_like(x)
    iters = 200
    for _ in range(10):
        purlin.all_reduce(x, out, env.handle, env.s)
        env.sync()
    total = 0.0
    for _ in range(iters):
        t0 = time.perf_counter()
        purlin.all_reduce(x, out, env.handle, env.s)
        total += time.perf_counter() - t0
        env.sync()
    python_us = total / iters * 1e6
    rust_us = purlin._native._rust_all_reduce_host_us(x, out, env.handle, env.s, iters)
    assert python_us > 0 and rust_us > 0
    line = (
        f"rank {env.rank}/{env.world}: all_reduce 16 B host cost per call: python "
        f"{python_us:.2f} us, rust {rust_us:.2f} us, binding overhead {python_us - rust_us:.2f} us"
    )
    print(line)
    path = os.environ.get("PURLIN_PY_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
