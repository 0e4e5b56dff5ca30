"""Shared by the CPU test files: runs one body per rank on its own thread, as ranks of a world."""

from __future__ import annotations

import threading


def run_ranks(ranks, body):
    """Runs body(rank) on a thread per rank of `ranks`; returns each rank's result or exception."""
    out: dict = {}

    def go(r):
        try:
            out[r] = body(r)
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out[r] = e

    threads = [threading.Thread(target=go, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out
