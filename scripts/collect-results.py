#!/usr/bin/env python3
"""Merges the per-world CSVs of a `run.sh --latency` run (results.tgz unpacked) into one CSV per
collective and timing mode under benches/results/, named date-gpu-commit-collective-mode.csv.

    scripts/collect-results.py RESULTS_DIR COMMIT [DATE] [GPU]
"""
import collections, datetime, os, sys

src, commit = sys.argv[1], sys.argv[2]
date = sys.argv[3] if len(sys.argv) > 3 else datetime.date.today().isoformat()
gpu = sys.argv[4] if len(sys.argv) > 4 else "h200"
names = {"ar": "all_reduce", "ag": "all_gather", "rs": "reduce_scatter", "a2a": "all_to_all",
         "agv": "all_gather_v", "rsv": "reduce_scatter_v", "a2av": "all_to_all_v"}
merged = collections.defaultdict(list)
header = {}
for f in sorted(os.listdir(src)):
    if not f.endswith(".csv") or "-w" not in f:
        continue
    short, rest = f.split("-", 1)
    mode = rest.rsplit("-w", 1)[0]
    for line in open(os.path.join(src, f)):
        line = line.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        if line.startswith("collective,"):
            header[(short, mode)] = line
            continue
        merged[(short, mode)].append(line)
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benches", "results")
for (short, mode), rows in sorted(merged.items()):
    out = os.path.join(root, f"{date}-{gpu}-{commit}-{names[short]}-{mode}.csv")
    rows.sort(key=lambda r: (-int(r.split(",")[1]), int(r.split(",")[2])))
    with open(out, "w") as o:
        o.write(header[(short, mode)] + "\n" + "\n".join(rows) + "\n")
    print(out)
