#!/usr/bin/env python3
"""The same data movement as the virtual node's collectives, done by plain torch ops in one
process on one GPU: the in-run baseline beside `purlin-bench` (run it in the same GPU session).

Every rank's buffers are tensors of this one process, as on the virtual node:
  all_reduce      out_r = stack(xs).sum(0), then copied into every rank's output
  all_gather      out_r = cat(xs) for every rank
  reduce_scatter  s = stack(xs).sum(0); out_r = part r of s
  all_to_all      out_r = cat(part r of every x_p)
  atom_reduce     stack(xs).sum(0) of `--ranks` inputs (the Atom row: an N-to-1 reduce)
  copy            dst.copy_(src) (cuMemcpyDtoD): the roofline's reference
Sizes follow nccl-tests (and purlin-bench): the output for all_gather, each rank's input
otherwise. The CSV has purlin-bench's columns (`purlin-bench --csv`): time is the median of
`--runs` CUDA-event-timed executions; `roofline` is the fewest bytes through memory (every
input read once, every output written once, summed over ranks) over the time, against the
same run's 256 MiB device-to-device copy (bytes read + written per second). `wrong` is the
number of wrong elements of one checked execution against an f64 reference on the host
(small sizes: `--check-bytes`), `floor_us` is empty (no launch floor here).

    python3 benches/torch_baseline.py --ranks 8 --sizes 64M,256M --dtype bf16 \
        --csv benches/results/DATE-h200-COMMIT-torch-baseline.csv
"""
import argparse
import csv
import statistics
import sys

import torch

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
NCCL_TYPE = {"bf16": "bfloat16", "f16": "half", "f32": "float"}
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "atom_reduce")


def parse_size(text):
    """`64M`, `1G`, `4096`: bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def bus_factor(collective, n):
    """nccl-tests' bus bandwidth factor: AllReduce 2(n-1)/n, the others (n-1)/n."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective == "atom_reduce":
        return 1.0
    return (n - 1) / n


def min_memory_bytes(collective, n, b):
    """Fewest bytes through memory summed over ranks (purlin-bench's `min_memory_bytes`)."""
    if collective in ("all_reduce", "all_to_all"):
        return 2 * n * b
    if collective == "all_gather":
        return n * (b / n) + n * b
    if collective == "reduce_scatter":
        return n * b + n * (b / n)
    if collective == "atom_reduce":
        return n * b + b
    raise ValueError(collective)


class Setup:
    """Every rank's input and output of one collective at one size."""

    def __init__(self, collective, n, size, dtype, device, fill):
        esize = torch.tensor([], dtype=dtype).element_size()
        if size % (esize * n) != 0:
            raise ValueError(f"{size} bytes is not a whole number of {n} parts of {dtype}")
        self.collective, self.n = collective, n
        count = size // esize
        self.part = count // n
        in_count = {"all_gather": count // n}.get(collective, count)
        out_count = {"all_gather": count, "reduce_scatter": count // n}.get(collective, count)
        self.xs = [fill(in_count, r).to(device=device, dtype=dtype) for r in range(n)]
        outs = 1 if collective == "atom_reduce" else n
        self.outs = [torch.empty(out_count, dtype=dtype, device=device) for _ in range(outs)]
        self.count = count

    def run(self):
        xs, outs, p = self.xs, self.outs, self.part
        if self.collective == "all_reduce":
            s = torch.stack(xs).sum(0)
            for o in outs:
                o.copy_(s)
        elif self.collective == "all_gather":
            for o in outs:
                torch.cat(xs, out=o)
        elif self.collective == "reduce_scatter":
            s = torch.stack(xs).sum(0)
            for r, o in enumerate(outs):
                o.copy_(s[r * p:(r + 1) * p])
        elif self.collective == "all_to_all":
            for r, o in enumerate(outs):
                torch.cat([x[r * p:(r + 1) * p] for x in xs], out=o)
        elif self.collective == "atom_reduce":
            torch.sum(torch.stack(xs), 0, out=outs[0])

    def wrong(self):
        """Wrong elements of the outputs against an f64 reference of the inputs (the sums
        rounded once to the type, as torch's f32-accumulated sum does for 16-bit types)."""
        xs = [x.double().cpu() for x in self.xs]
        dtype = self.outs[0].dtype
        if self.collective in ("all_reduce", "atom_reduce"):
            want = [torch.stack(xs).sum(0).to(dtype)] * len(self.outs)
        elif self.collective == "all_gather":
            want = [torch.cat(xs).to(dtype)] * self.n
        elif self.collective == "reduce_scatter":
            s = torch.stack(xs).sum(0).to(dtype)
            want = [s[r * self.part:(r + 1) * self.part] for r in range(self.n)]
        else:
            p = self.part
            want = [torch.cat([x[r * p:(r + 1) * p] for x in xs]).to(dtype) for r in range(self.n)]
        return sum(int((o.cpu() != w).sum()) for o, w in zip(self.outs, want))


def median_ms(fn, runs, warmup):
    """Median milliseconds of `runs` executions of `fn`, each between a pair of CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def copy_bandwidth(device, runs):
    """Bytes read + written per second of a 256 MiB device-to-device copy."""
    n = 256 << 20
    src = torch.zeros(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), runs, 3)
    return 2 * n / (ms * 1e-3)


def small_values(count, rank):
    """Small integers (exact in every type and in their sums), different per rank."""
    return ((torch.arange(count, dtype=torch.float64) * 7 + rank * 13) % 17) - 8


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--sizes", default="64M,256M", help="comma-separated sizes (K, M, G)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--check-bytes", default="1M", help="size of the checked execution")
    ap.add_argument("--csv", help="write the rows here (else stdout)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_baseline: no CUDA device")
    device = torch.device("cuda")
    dtype = DTYPES[args.dtype]
    n = args.ranks
    wanted = [c.strip() for c in args.collectives.split(",") if c.strip()]
    for c in wanted:
        if c not in COLLECTIVES:
            sys.exit(f"torch_baseline: unknown collective {c} (one of {', '.join(COLLECTIVES)})")
    copy_bw = copy_bandwidth(device, args.runs)
    rows = []
    for collective in wanted:
        check = Setup(collective, n, parse_size(args.check_bytes), dtype, device, small_values)
        check.run()
        torch.cuda.synchronize()
        wrong = check.wrong()
        del check
        for size in [parse_size(s) for s in args.sizes.split(",") if s.strip()]:
            gen = torch.Generator(device=device).manual_seed(size + n)
            setup = Setup(collective, n, size, dtype, device,
                          lambda count, r: torch.randn(count, device=device, generator=gen))
            ms = median_ms(setup.run, args.runs, args.warmup)
            seconds = ms * 1e-3
            algbw = size / seconds / 1e9
            rows.append({
                "collective": collective, "world": n, "size": size, "count": setup.count,
                "type": NCCL_TYPE[args.dtype],
                "redop": "sum" if collective in ("all_reduce", "reduce_scatter", "atom_reduce") else "-",
                "time_us": f"{ms * 1e3:.2f}", "algbw_gbs": f"{algbw:.2f}",
                "busbw_gbs": f"{algbw * bus_factor(collective, n):.2f}", "wrong": wrong,
                "roofline": f"{min_memory_bytes(collective, n, size) / seconds / copy_bw:.3f}",
                "floor_us": "",
            })
            del setup
            torch.cuda.empty_cache()
    columns = ["collective", "world", "size", "count", "type", "redop", "time_us", "algbw_gbs",
               "busbw_gbs", "wrong", "roofline", "floor_us"]
    out = open(args.csv, "w", newline="") if args.csv else sys.stdout
    out.write(f"# torch {torch.__version__} on {torch.cuda.get_device_name(device)}; "
              f"copy roofline {copy_bw / 1e12:.3f} TB/s (256 MiB cuMemcpyDtoD, read + written)\n")
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    if args.csv:
        out.close()
    bad = [r for r in rows if r["wrong"]]
    print(f"torch_baseline: {len(rows)} rows, copy {copy_bw / 1e12:.3f} TB/s, "
          f"{len(bad)} with wrong elements", file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
