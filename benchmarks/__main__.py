"""``python -m benchmarks``: every workload on pitrio, and on the peers with ``--peers``.

See ``benchmarks/README.md``. Examples::

    python -m benchmarks --quick                         # a fast smoke run, pitrio only
    python -m benchmarks --peers --rounds 3              # every peer, interleaved
    python -m benchmarks --peers pi_node,pi_py_port --instructions
    python -m benchmarks --peers --markdown benchmarks/results.md

Writes ``latest.json`` and ``ratios.png``/``ratios.svg`` to ``--out``
(``benchmarks/results/``) and prints a table. Exit status 1 if a measurement failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks._harness import (
    DEFAULT_OUT,
    DEFAULT_PEERS_DIR,
    METRICS,
    PEERS,
    HarnessError,
    Settings,
    markdown,
    print_report,
    rebuild,
    run,
    update_markdown,
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="pitrio's benchmarks, optionally interleaved with the peers'.",
    )
    p.add_argument(
        "--peers",
        nargs="?",
        const=",".join(PEERS),
        default="",
        metavar="PEER,...",
        help=f"also run the peers (all when no list is given: {', '.join(PEERS)})",
    )
    p.add_argument(
        "--peers-dir",
        type=Path,
        default=DEFAULT_PEERS_DIR,
        help="the peers-bench checkout holding `run` (default: ../shared/peers-bench "
        "next to the repository)",
    )
    p.add_argument(
        "--rounds", type=int, default=0, help="interleaved rounds (default 3; 1 with --quick)"
    )
    p.add_argument(
        "--quick", action="store_true", help="tiny sizes: a smoke run, not a measurement"
    )
    p.add_argument("--instructions", action="store_true", help="add cachegrind instruction counts")
    p.add_argument(
        "--metrics",
        default=",".join(METRICS),
        metavar="METRIC,...",
        help=f"which workloads (default all: {', '.join(METRICS)})",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where JSON and charts go")
    p.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="measure nothing: rebuild the table, chart and markdown from a recorded sitting",
    )
    p.add_argument("--markdown", type=Path, help="update the harness's section of this file")
    p.add_argument(
        "--reps", type=int, default=0, help="reps per loop measurement (default: each metric's own)"
    )
    p.add_argument(
        "--concurrent-reps",
        type=int,
        default=0,
        help="reps of the concurrent workload (default: --reps, else its own 3)",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per measurement")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    a = _parser().parse_args(args)
    metrics = tuple(m for m in a.metrics.split(",") if m)
    unknown = sorted(set(metrics) - set(METRICS))
    if unknown:
        print(
            f"error: unknown metrics {unknown}; choose from {', '.join(METRICS)}", file=sys.stderr
        )
        return 2
    settings = Settings(
        peers=tuple(p for p in a.peers.split(",") if p),
        peers_dir=a.peers_dir.resolve(),
        rounds=a.rounds or (1 if a.quick else 3),
        quick=a.quick,
        instructions=a.instructions,
        metrics=metrics,
        out=a.out,
        timeout=a.timeout,
        reps=a.reps,
        concurrent_reps=a.concurrent_reps,
    )
    try:
        if a.from_json is not None:
            report = rebuild(a.from_json, settings.out)
        else:
            report = run(settings, args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print_report(report)
    if a.markdown is not None:
        update_markdown(a.markdown, markdown(report))
    print(f"wrote {settings.out / 'latest.json'} {' '.join(report['chart'])}", file=sys.stderr)
    return 1 if any(m["error"] for m in report["measurements"]) else 0


if __name__ == "__main__":
    sys.exit(main())
