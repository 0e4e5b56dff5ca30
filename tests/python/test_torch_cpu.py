"""CPU tests that need torch (skipped without it; no GPU needed): the bootstrap exchange over
torch's real key-value stores and process groups (gloo, several processes under torchrun),
a rank that never comes named in a TimeoutError, and real torch tensors and dtypes meeting the
argument checks.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import purlin  # noqa: E402
from purlin import _bootstrap, _native  # noqa: E402
from rank_threads import run_ranks  # noqa: E402

HERE = pathlib.Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stores():
    """A TCPStore server and two more clients: one store object per rank of three."""
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, 3, True, timedelta(seconds=30), wait_for_workers=False)
    clients = [dist.TCPStore("127.0.0.1", port, 3, False, timedelta(seconds=30)) for _ in range(2)]
    return [dist.PrefixStore("group", s) for s in [server] + clients]


def test_store_exchange_over_a_tcp_store(stores):
    def body(rank):
        ex = _bootstrap.StoreExchange(stores[rank], rank, 3, "purlin/tcp/0", timeout=20)
        return ex(b"rank%d" % rank), ex(b""), ex(bytes(range(256)) * (rank + 1))

    out = run_ranks(range(3), body)
    for r in range(3):
        assert not isinstance(out[r], BaseException), out[r]
        first, barrier, big = out[r]
        assert first == [b"rank0", b"rank1", b"rank2"]
        assert barrier == [b""] * 3
        assert big == [bytes(range(256)) * (p + 1) for p in range(3)]


def test_store_exchange_names_the_missing_rank_over_a_tcp_store(stores):
    def body(rank):
        return _bootstrap.StoreExchange(stores[rank], rank, 3, "purlin/tcp/1", timeout=1)(b"x")

    out = run_ranks([0, 2], body)
    for r in (0, 2):
        assert isinstance(out[r], TimeoutError), out[r]
        assert "rank(s) 1 of the group (of 3)" in str(out[r])


def test_exchange_for_a_real_group_uses_its_store():
    port = free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        group = dist.group.WORLD
        assert _bootstrap._group_store(dist, group) is not None
        ex = _bootstrap.exchange_for(dist, group, 0, 1, 5.0)
        assert isinstance(ex, _bootstrap.StoreExchange)
        assert ex(b"alone") == [b"alone"]
        sub = dist.new_group([0])
        ex2 = _bootstrap.exchange_for(dist, sub, 0, 1, 5.0)
        assert ex2.prefix != ex.prefix
        if not _native.driver_present():
            with pytest.raises(RuntimeError, match="no CUDA driver"):
                purlin.initialize(group, "cuda:0", 90, 0)
        with pytest.raises(ValueError, match="CUDA device"):
            purlin.initialize(group, "cpu", 90, 0)
        with pytest.raises(TypeError, match="arch must be an int"):
            purlin.initialize(group, 0, "sm_90", 0)
    finally:
        dist.destroy_process_group()


def test_processes_under_torchrun_exchange_through_the_group_store():
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
           str(HERE / "store_worker.py")]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert r.stdout.count("store worker ok") == 3, r.stdout


@pytest.mark.parametrize(
    "dtype, reducible",
    [
        (torch.float32, True),
        (torch.float16, True),
        (torch.bfloat16, True),
        (torch.float8_e4m3fn, True),
        (torch.float8_e5m2, True),
        (torch.float64, False),
        (torch.int32, False),
        (torch.bool, False),
        (torch.float8_e4m3fnuz, False),
    ],
    ids=str,
)
def test_real_torch_dtypes(dtype, reducible):
    class OnCuda:
        """A real CPU tensor's metadata, claiming to live on cuda:0."""

        def __init__(self, t):
            self.t, self.dtype, self.device = t, t.dtype, torch.device("cuda", 0)

        def data_ptr(self):
            return 1 << 20

        def numel(self):
            return self.t.numel()

        def element_size(self):
            return self.t.element_size()

        def is_contiguous(self):
            return self.t.is_contiguous()

    h = _native._unbound_handle(0, 2, 0)
    x = OnCuda(torch.zeros(8, dtype=dtype))
    if reducible:
        with pytest.raises(RuntimeError, match="finalized"):
            purlin.all_reduce(x, x, h, 0)
    else:
        with pytest.raises(TypeError, match=f"in_tensor is {dtype}"):
            purlin.all_reduce(x, x, h, 0)
    with pytest.raises(RuntimeError, match="finalized"):
        purlin.all_gather(x, OnCuda(torch.zeros(16, dtype=dtype)), h, 0)


def test_real_cpu_and_meta_tensors_are_refused():
    h = _native._unbound_handle(0, 2, 0)
    with pytest.raises(ValueError, match="in_tensor is on cpu"):
        purlin.all_reduce(torch.ones(4), torch.ones(4), h, 0)
    with pytest.raises(ValueError, match="in_tensor is on meta"):
        purlin.all_gather(torch.empty(4, device="meta"), torch.empty(8, device="meta"), h, 0)
