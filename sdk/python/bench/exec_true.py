#!/usr/bin/env python3
"""Times `true` in a box through the SDK (blocking client).

Usage: exec_true.py SOCKET BOX ITERS

Connects to boxd on SOCKET (never starting one), runs `true` in the
running box BOX a few times to warm up, then ITERS times, and prints one
JSON line: {"sdk": "python", "p50_ms": ..., "mean_ms": ..., "p90_ms": ...,
"iters": N}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import boxd

WARMUP = 5


def percentile(sorted_ms: "list[float]", p: float) -> float:
    """The nearest-rank percentile of an ascending list."""
    rank = max(1, int(round(p / 100 * len(sorted_ms))))
    return sorted_ms[min(rank, len(sorted_ms)) - 1]


def main(argv: "list[str]") -> int:
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    socket, name = argv[1], argv[2]
    try:
        iters = int(argv[3])
        if iters < 1:
            raise ValueError
    except ValueError:
        print(f"ITERS must be a positive integer, not {argv[3]!r}", file=sys.stderr)
        return 2
    try:
        with boxd.Client(socket, start=False) as client:
            box = client.box(name)
            for _ in range(WARMUP):
                box.exec(["true"]).check()
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                box.exec(["true"]).check()
                times.append((time.perf_counter() - t0) * 1000)
    except boxd.BoxdError as e:
        print(f"exec_true: {e}", file=sys.stderr)
        return 1
    times.sort()
    print(
        json.dumps(
            {
                "sdk": "python",
                "p50_ms": round(statistics.median(times), 3),
                "mean_ms": round(statistics.fmean(times), 3),
                "p90_ms": round(percentile(times, 90), 3),
                "iters": iters,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
