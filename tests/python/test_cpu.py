"""CPU tests of the Python package: no GPU and no torch needed (CI runs them).

They check that the module imports, the enums and constants match the original's, every argument
error a call can raise before touching the device (on stand-in tensor objects and a handle with
nothing behind it), the bootstrap exchange and its timeouts (threads over an in-memory store,
through the native workspace set-up), and that the type stubs match the module.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import threading
import time
from datetime import timedelta

import pytest

import purlin
from purlin import _bootstrap, _native
from rank_threads import run_ranks

STUB = pathlib.Path(_native.__file__).with_name("_native.pyi")


# --- stand-ins for torch objects ------------------------------------------------------------


class Dtype:
    """Prints like a torch dtype (`torch.float32`), which is all the module reads of one."""

    def __init__(self, name: str, size: int):
        self.name, self.size = name, size

    def __str__(self) -> str:
        return f"torch.{self.name}"


F32, F16, BF16 = Dtype("float32", 4), Dtype("float16", 2), Dtype("bfloat16", 2)
E4M3, E5M2 = Dtype("float8_e4m3fn", 1), Dtype("float8_e5m2", 1)
I32, I64, U8 = Dtype("int32", 4), Dtype("int64", 8), Dtype("uint8", 1)


class Device:
    def __init__(self, type: str, index=None):
        self.type, self.index = type, index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


class Tensor:
    """Has exactly the attributes the module reads of a torch.Tensor."""

    def __init__(self, numel, dtype=F32, device=("cuda", 0), ptr=0x7F0000000000, contiguous=True):
        self._numel, self.dtype, self._ptr, self._contiguous = numel, dtype, ptr, contiguous
        self.device = Device(*device)

    def data_ptr(self):
        return self._ptr

    def numel(self):
        return self._numel

    def element_size(self):
        return self.dtype.size

    def is_contiguous(self):
        return self._contiguous


class Stream:
    cuda_stream = 0


WORLD = 4


@pytest.fixture
def handle():
    return _native._unbound_handle(1, WORLD, 0)


def unbound(call, *args, **kwargs):
    """Every check passes: the call then refuses the handle, which has nothing behind it."""
    with pytest.raises(RuntimeError, match="finalized"):
        call(*args, **kwargs)


# --- import, enums, constants ---------------------------------------------------------------


def test_imports_with_version_and_exports():
    assert purlin.__version__ == _native.__version__
    assert purlin.__version__.count(".") == 2
    for name in purlin.__all__:
        assert hasattr(purlin, name), name
    assert purlin.ContextHandle is _native.ContextHandle


def test_reduction_mode_matches_the_original():
    assert [(m.name, int(m)) for m in purlin.ReductionMode] == [
        ("NON_DETERMINISTIC", 0),
        ("DETERMINISTIC", 1),
    ]
    assert purlin.ReductionMode.DETERMINISTIC == 1
    with pytest.raises(ValueError):
        purlin.ReductionMode(42)


def test_data_type_and_reduce_op():
    assert {m.name: int(m) for m in purlin.DataType} == {
        "BF16": 0,
        "FP16": 1,
        "FP8_E4M3": 2,
        "FP8_E5M2": 3,
        "FP32": 4,
    }
    assert [m.name for m in purlin.ReduceOp] == ["SUM", "MAX", "MIN", "PROD"]


def test_constants_are_the_originals():
    assert purlin.STAGING_BUFFER_SIZE == 256 * 1024 * 1024
    assert purlin.PACKET_BUFFER_SIZE == 4 * 1024 * 1024
    assert purlin.MAX_RANKS == 16
    assert purlin.DIFFERENCES and all(isinstance(d, str) for d in purlin.DIFFERENCES)


def test_every_public_call_has_a_docstring():
    for name in purlin.__all__:
        obj = getattr(purlin, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), name


# --- the handle -----------------------------------------------------------------------------


def test_unbound_handle_reports_itself(handle):
    assert (handle.rank, handle.world, handle.device, handle.arch) == (1, WORLD, 0, 900)
    assert handle.finalized
    assert "rank 1 of 4" in repr(handle)
    purlin.finalize(handle, 0)  # nothing to release: a no-op, twice
    purlin.finalize(handle, Stream())


def test_unbound_handle_checks_its_own_arguments():
    with pytest.raises(ValueError, match="rank 4 is outside"):
        _native._unbound_handle(4, 4, 0)
    with pytest.raises(ValueError, match="world size 17"):
        _native._unbound_handle(0, 17, 0)
    with pytest.raises(ValueError, match="compute capability 7.0"):
        _native._unbound_handle(0, 2, 0, arch=61)
    assert _native._unbound_handle(0, 2, 0, arch=80).arch == 800
    assert _native._unbound_handle(0, 2, 0, arch=1000).arch == 1000
    assert _native._unbound_handle(0, 2, 0, arch=120).arch == 1000


def test_synchronize_on_a_finalized_handle_raises(handle):
    with pytest.raises(RuntimeError, match="finalized"):
        purlin.synchronize(handle, 0)


# --- argument errors ------------------------------------------------------------------------


def test_well_formed_calls_reach_the_handle(handle):
    n = 64
    unbound(purlin.all_reduce, Tensor(n), Tensor(n), handle, 0)
    unbound(purlin.all_reduce, Tensor(n, BF16), Tensor(n, BF16), handle, 0, purlin.ReductionMode.DETERMINISTIC)
    unbound(purlin.all_reduce, Tensor(n, E4M3), Tensor(n, E4M3), handle, 0, op=purlin.ReduceOp.MAX)
    unbound(purlin.all_gather, Tensor(n, I64), Tensor(WORLD * n, I64), handle, 0)
    unbound(purlin.reduce_scatter, Tensor(WORLD * n, F16), Tensor(n, F16), handle, 0)
    unbound(purlin.all_to_all, Tensor(WORLD * n, U8), Tensor(WORLD * n, U8), handle, 0)
    sizes = [16, 0, 48, 4]
    unbound(purlin.all_gather_v, Tensor(0), Tensor(sum(sizes) // 4), sizes, handle, 0)
    unbound(purlin.reduce_scatter_v, Tensor(sum(sizes) // 4), Tensor(0), sizes, handle, 0)
    unbound(purlin.all_to_all_v, Tensor(sum(sizes) // 4), Tensor(4), sizes + [4, 0, 0, 0], handle, 0)
    # Keyword names are the original's.
    unbound(
        purlin.all_gather_v,
        in_tensor=Tensor(0),
        out_tensor=Tensor(17),
        bytes_list=sizes,
        handle=handle,
        stream_ptr=Stream(),
    )


@pytest.mark.parametrize("bad", [None, 3, "tensor", object(), [1.0, 2.0]])
def test_objects_that_are_not_tensors_are_type_errors(handle, bad):
    with pytest.raises(TypeError, match="in_tensor must be a torch.Tensor"):
        purlin.all_reduce(bad, Tensor(4), handle, 0)
    with pytest.raises(TypeError, match="out_tensor must be a torch.Tensor"):
        purlin.all_gather(Tensor(4), bad, handle, 0)


def test_cpu_tensors_are_value_errors_that_say_where_to_move_them(handle):
    with pytest.raises(ValueError, match=r"in_tensor is on cpu.*\.to\('cuda:0'\)"):
        purlin.all_reduce(Tensor(4, device=("cpu",)), Tensor(4), handle, 0)
    with pytest.raises(ValueError, match="out_tensor is on meta"):
        purlin.all_to_all(Tensor(4), Tensor(4, device=("meta",)), handle, 0)


def test_tensors_of_another_gpu_are_value_errors(handle):
    with pytest.raises(ValueError, match="cuda:1, but the handle was initialized on cuda:0"):
        purlin.all_reduce(Tensor(4, device=("cuda", 1)), Tensor(4), handle, 0)


def test_non_contiguous_tensors_are_value_errors(handle):
    with pytest.raises(ValueError, match=r"not contiguous: pass in_tensor\.contiguous\(\)"):
        purlin.all_reduce(Tensor(4, contiguous=False), Tensor(4), handle, 0)


def test_misaligned_tensors_are_value_errors(handle):
    with pytest.raises(ValueError, match="not 16-byte aligned"):
        purlin.all_reduce(Tensor(4, ptr=0x7F0000000004), Tensor(4), handle, 0)
    # An empty tensor's data pointer is never read.
    unbound(purlin.all_reduce, Tensor(0, ptr=3), Tensor(0, ptr=5), handle, 0)


@pytest.mark.parametrize("call", ["all_reduce", "reduce_scatter"])
@pytest.mark.parametrize("dtype", [I32, I64, U8, Dtype("float64", 8), Dtype("bool", 1)])
def test_reductions_refuse_dtypes_they_cannot_reduce(handle, call, dtype):
    n = WORLD * 4
    out = n if call == "all_reduce" else 4
    with pytest.raises(TypeError, match=f"{call} reduces torch.float32.*in_tensor is torch.{dtype.name}"):
        getattr(purlin, call)(Tensor(n, dtype), Tensor(out, dtype), handle, 0)


def test_copies_take_any_dtype(handle):
    for dtype in (I32, I64, U8, Dtype("float64", 8), Dtype("bool", 1), Dtype("complex64", 8)):
        unbound(purlin.all_gather, Tensor(8, dtype), Tensor(8 * WORLD, dtype), handle, 0)


def test_mixed_dtypes_are_type_errors(handle):
    with pytest.raises(TypeError, match="in_tensor is torch.float32 but out_tensor is torch.bfloat16"):
        purlin.all_reduce(Tensor(8), Tensor(8, BF16), handle, 0)


def test_wrong_output_sizes_are_value_errors(handle):
    with pytest.raises(ValueError, match="out_tensor has 7 elements but needs 8"):
        purlin.all_reduce(Tensor(8), Tensor(7), handle, 0)
    with pytest.raises(ValueError, match="needs 32: all_gather writes world"):
        purlin.all_gather(Tensor(8), Tensor(8), handle, 0)
    with pytest.raises(ValueError, match="not a multiple of the world size 4"):
        purlin.reduce_scatter(Tensor(10), Tensor(2), handle, 0)
    with pytest.raises(ValueError, match="needs 3: reduce_scatter"):
        purlin.reduce_scatter(Tensor(12), Tensor(2), handle, 0)
    with pytest.raises(ValueError, match="not a multiple of the world size 4"):
        purlin.all_to_all(Tensor(6), Tensor(6), handle, 0)


def test_bad_reduction_modes_and_ops(handle):
    for mode in (2, 42, -1):
        with pytest.raises(ValueError, match="reduction_mode must be"):
            purlin.all_reduce(Tensor(4), Tensor(4), handle, 0, reduction_mode=mode)
    with pytest.raises(TypeError):
        purlin.all_reduce(Tensor(4), Tensor(4), handle, 0, reduction_mode="DETERMINISTIC")
    with pytest.raises(ValueError, match="op must be"):
        purlin.reduce_scatter(Tensor(4), Tensor(1), handle, 0, op=7)
    with pytest.raises(TypeError):
        purlin.all_gather(Tensor(4), Tensor(16), handle, 0, purlin.ReductionMode.DETERMINISTIC)


def test_bad_streams(handle):
    with pytest.raises(TypeError, match="stream_ptr must be an int"):
        purlin.all_reduce(Tensor(4), Tensor(4), handle, "stream")
    with pytest.raises(ValueError, match="non-negative int"):
        purlin.all_reduce(Tensor(4), Tensor(4), handle, -1)
    unbound(purlin.all_reduce, Tensor(4), Tensor(4), handle, Stream())


def test_a_handle_must_be_a_handle():
    with pytest.raises(TypeError):
        purlin.all_reduce(Tensor(4), Tensor(4), "handle", 0)
    with pytest.raises(TypeError):
        purlin.finalize(None, 0)


def test_v_size_lists_are_checked(handle):
    t = Tensor(64)
    with pytest.raises(ValueError, match="bytes_list has 3 entries; it needs 4"):
        purlin.all_gather_v(t, Tensor(256), [16, 16, 16], handle, 0)
    with pytest.raises(ValueError, match="splits has 4 entries; it needs 8: world sizes sent"):
        purlin.all_to_all_v(t, t, [16] * 4, handle, 0)
    with pytest.raises(ValueError, match=r"bytes_list\[2\] is -16"):
        purlin.all_gather_v(t, Tensor(256), [16, 16, -16, 16], handle, 0)
    with pytest.raises(TypeError, match=r"bytes_list\[1\] must be an int"):
        purlin.reduce_scatter_v(t, t, [16, 1.5, 16, 16], handle, 0)
    with pytest.raises(TypeError, match="bytes_list must be a list of ints"):
        purlin.all_gather_v(t, t, 64, handle, 0)
    with pytest.raises(ValueError, match="not a whole number of 4-byte elements"):
        purlin.all_gather_v(t, Tensor(256), [16, 6, 16, 16], handle, 0)


def test_v_buffers_must_hold_what_the_sizes_say(handle):
    sizes = [16, 32, 48, 64]  # rank 1 sends 32 bytes, all gather 160
    with pytest.raises(ValueError, match="in_tensor holds 16 bytes but needs 32"):
        purlin.all_gather_v(Tensor(4), Tensor(40), sizes, handle, 0)
    with pytest.raises(ValueError, match="out_tensor holds 156 bytes but needs 160"):
        purlin.all_gather_v(Tensor(8), Tensor(39), sizes, handle, 0)
    with pytest.raises(ValueError, match="in_tensor holds 156 bytes but needs 160"):
        purlin.reduce_scatter_v(Tensor(39), Tensor(8), sizes, handle, 0)
    with pytest.raises(ValueError, match="out_tensor holds 28 bytes but needs 32"):
        purlin.reduce_scatter_v(Tensor(40), Tensor(7), sizes, handle, 0)
    splits = [16, 16, 16, 16, 0, 0, 0, 8]
    with pytest.raises(ValueError, match="in_tensor holds 60 bytes but needs 64"):
        purlin.all_to_all_v(Tensor(15), Tensor(2), splits, handle, 0)
    with pytest.raises(ValueError, match="out_tensor holds 4 bytes but needs 8"):
        purlin.all_to_all_v(Tensor(16), Tensor(1), splits, handle, 0)
    with pytest.raises(ValueError, match="max_bytes is 8, but splits has an entry of 16 bytes"):
        purlin.all_to_all_v(Tensor(16), Tensor(2), splits, handle, 0, max_bytes=8)
    unbound(purlin.all_to_all_v, Tensor(16), Tensor(2), splits, handle, 0, max_bytes=1 << 20)


# --- initialize without torch.distributed ---------------------------------------------------


def test_initialize_needs_an_initialized_torch_distributed():
    try:
        import torch.distributed as dist
    except ImportError:
        with pytest.raises(RuntimeError, match="needs torch"):
            purlin.initialize(None, 0, 90, 0)
        return
    if dist.is_available() and dist.is_initialized():
        pytest.skip("torch.distributed is initialized in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        purlin.initialize(None, 0, 90, 0)


def test_create_context_checks_before_touching_a_gpu():
    exchange = lambda data: [data]  # noqa: E731
    with pytest.raises(ValueError, match="world size 0"):
        _native.create_context(0, 0, 0, 90, 0, exchange)
    with pytest.raises(ValueError, match="compute capability 7.0"):
        _native.create_context(0, 1, 0, 52, 0, exchange)
    with pytest.raises(ValueError, match="kernel_timeout"):
        _native.create_context(0, 1, 0, 90, 0, exchange, kernel_timeout=0.0)
    if not _native.driver_present():
        with pytest.raises(RuntimeError, match="no CUDA driver"):
            _native.create_context(0, 1, 0, 90, 0, exchange)


# --- the bootstrap exchange -----------------------------------------------------------------


class MemoryStore:
    """An in-memory stand-in for a c10d store (set, get, wait, check, delete_key)."""

    def __init__(self):
        self.data: dict = {}
        self.cond = threading.Condition()

    def set(self, key, value):
        with self.cond:
            self.data[key] = bytes(value)
            self.cond.notify_all()

    def get(self, key):
        with self.cond:
            return self.data[key]

    def check(self, keys):
        with self.cond:
            return all(k in self.data for k in keys)

    def wait(self, keys, timeout: timedelta):
        deadline = time.monotonic() + timeout.total_seconds()
        with self.cond:
            while not all(k in self.data for k in keys):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError("Wait timeout")
                self.cond.wait(left)

    def delete_key(self, key):
        with self.cond:
            return self.data.pop(key, None) is not None


def test_store_exchange_gathers_in_rank_order_and_cleans_up():
    store = MemoryStore()

    def body(rank):
        ex = _bootstrap.StoreExchange(store, rank, 3, "purlin/test/0", timeout=10)
        first = ex(bytes([rank]) * (rank + 1))
        second = ex(b"")  # a barrier: empty contributions
        third = ex(b"x%d" % rank)
        return first, second, third

    out = run_ranks(range(3), body)
    for rank in range(3):
        first, second, third = out[rank]
        assert first == [b"\x00", b"\x01\x01", b"\x02\x02\x02"]
        assert second == [b"", b"", b""]
        assert third == [b"x0", b"x1", b"x2"]
    # Rounds 0 and 1 were deleted once every rank had moved past them.
    assert sorted(store.data) == [f"purlin/test/0/2/{r}" for r in range(3)]


def test_store_exchange_names_the_rank_that_never_comes():
    store = MemoryStore()

    def body(rank):
        return _bootstrap.StoreExchange(store, rank, 3, "purlin/test/1", timeout=0.5)(b"hi")

    out = run_ranks([0, 2], body)
    for rank in (0, 2):
        assert isinstance(out[rank], TimeoutError), out[rank]
        assert "rank(s) 1 of the group (of 3)" in str(out[rank])


def test_store_exchange_rejects_nonsense():
    with pytest.raises(ValueError):
        _bootstrap.StoreExchange(MemoryStore(), 3, 3, "p", 1.0)
    with pytest.raises(ValueError):
        _bootstrap.StoreExchange(MemoryStore(), 0, 1, "p", 0)


def test_sequence_numbers_keep_successive_handles_apart():
    a = _bootstrap._next_sequence("test-group")
    b = _bootstrap._next_sequence("test-group")
    assert b == a + 1


@pytest.mark.parametrize("world", [1, 2, 3])
def test_native_workspace_setup_runs_over_the_python_exchange(world):
    store = MemoryStore()

    def body(rank):
        ex = _bootstrap.StoreExchange(store, rank, world, f"purlin/ws/{world}", timeout=20)
        return _native._host_workspace_addresses(rank, world, ex)

    out = run_ranks(range(world), body)
    addresses = [out[r] for r in range(world)]
    for a in addresses:
        assert not isinstance(a, BaseException), a
    # Ranks are threads of one process: every rank sees every rank's staging at one address.
    assert all(a == addresses[0] for a in addresses)
    assert len(set(addresses[0])) == world and all(x % 256 == 0 for x in addresses[0])


def test_native_workspace_setup_raises_the_exchanges_timeout_error():
    store = MemoryStore()

    def body(rank):
        ex = _bootstrap.StoreExchange(store, rank, 3, "purlin/ws/missing", timeout=0.5)
        return _native._host_workspace_addresses(rank, 3, ex)

    out = run_ranks([0, 1], body)
    for rank in (0, 1):
        assert isinstance(out[rank], TimeoutError), out[rank]
        assert "rank(s) 2" in str(out[rank])


def test_native_workspace_setup_reports_a_broken_exchange():
    def short(data):
        return []  # no records at all

    with pytest.raises(RuntimeError, match="0 records for 2 ranks"):
        _native._host_workspace_addresses(0, 2, short)

    def raises(data):
        raise KeyError("the store went away")

    with pytest.raises(KeyError, match="the store went away"):
        _native._host_workspace_addresses(0, 2, raises)


# --- type stubs -----------------------------------------------------------------------------


def stub_tree():
    return ast.parse(STUB.read_text())


def stub_functions():
    return {
        node.name: node
        for node in stub_tree().body
        if isinstance(node, ast.FunctionDef)
    }


def native_functions():
    return {
        name: obj
        for name, obj in vars(_native).items()
        if callable(obj) and not isinstance(obj, type) and not name.startswith("__")
    }


def test_the_stub_lists_exactly_the_native_functions():
    assert STUB.is_file(), STUB
    assert set(stub_functions()) == set(native_functions())
    assert STUB.with_name("py.typed").is_file()


def test_stub_signatures_match_the_native_ones():
    for name, node in stub_functions().items():
        sig = inspect.signature(native_functions()[name])
        args = node.args
        stub_params = (
            [(a.arg, "POSITIONAL_OR_KEYWORD") for a in args.args]
            + [(a.arg, "KEYWORD_ONLY") for a in args.kwonlyargs]
        )
        native_params = [(p.name, p.kind.name) for p in sig.parameters.values()]
        assert stub_params == native_params, name
        stub_defaults = [ast.literal_eval(d) for d in args.defaults] + [
            ast.literal_eval(d) for d in args.kw_defaults if d is not None
        ]
        native_defaults = [
            p.default for p in sig.parameters.values() if p.default is not inspect.Parameter.empty
        ]
        assert stub_defaults == native_defaults, name


def test_the_stub_describes_the_handle_and_constants():
    tree = stub_tree()
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    props = {
        f.name
        for f in classes["ContextHandle"].body
        if isinstance(f, ast.FunctionDef)
    }
    native_props = {
        n for n, v in vars(_native.ContextHandle).items() if isinstance(v, property) or type(v).__name__ == "getset_descriptor"
    }
    assert props == native_props
    constants = {
        n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert constants == {"__version__", "MAX_RANKS", "STAGING_BUFFER_SIZE", "PACKET_BUFFER_SIZE"}
    for c in constants:
        assert hasattr(_native, c)


def test_the_public_wrappers_keep_the_originals_parameter_names():
    expected = {
        "initialize": ["group", "device", "arch", "stream_ptr", "timeout", "kernel_timeout"],
        "finalize": ["handle", "stream_ptr"],
        "all_gather": ["in_tensor", "out_tensor", "handle", "stream_ptr"],
        "all_gather_v": ["in_tensor", "out_tensor", "bytes_list", "handle", "stream_ptr"],
        "all_reduce": ["in_tensor", "out_tensor", "handle", "stream_ptr", "reduction_mode", "op"],
        "all_to_all": ["in_tensor", "out_tensor", "handle", "stream_ptr"],
        "all_to_all_v": ["in_tensor", "out_tensor", "splits", "handle", "stream_ptr", "max_bytes"],
        "reduce_scatter": ["in_tensor", "out_tensor", "handle", "stream_ptr", "reduction_mode", "op"],
        "reduce_scatter_v": [
            "in_tensor", "out_tensor", "bytes_list", "handle", "stream_ptr", "reduction_mode", "op",
        ],
    }
    for name, params in expected.items():
        assert list(inspect.signature(getattr(purlin, name)).parameters) == params, name
