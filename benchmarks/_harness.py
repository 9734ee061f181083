"""The benchmark harness behind ``python -m benchmarks``.

Every measurement is one fresh subprocess printing one JSON line: pitrio's workloads
(:mod:`benchmarks.bench_loop`, :mod:`benchmarks._workloads`) and, with ``--peers``, the
peers' own scripts (``PEERS_DIR/run PEER METRIC``). Rounds are interleaved (round 1:
turn on A, B, C, then tool on A, B, C, ...; round 2: the same again), so that a noisy
machine slows every subject alike and the ratios hold. The peak RSS of each child comes
from ``os.wait4``. Each cell of the summary is the median over the rounds.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_PEERS_DIR: Final = ROOT.parent / "shared" / "peers-bench"
"""``../shared/peers-bench`` next to the repository (override with ``--peers-dir``)."""
DEFAULT_OUT: Final = ROOT / "benchmarks" / "results"

PEERS: Final = ("pi_node", "pi_py_port", "pydantic_ai", "openai_agents", "langgraph")
PEER_LABELS: Final = {
    "pitrio": "pitrio",
    "pi_node": "Pi on Node",
    "pi_py_port": "pi-ai-python",
    "pydantic_ai": "pydantic-ai",
    "openai_agents": "openai-agents",
    "langgraph": "langgraph",
    "openai_sdk": "openai SDK",
}
LOOP_METRICS: Final = ("turn", "tool", "concurrent", "batch", "stream")
METRICS: Final = (*LOOP_METRICS, "memory", "abort", "transcript", "import", "sse")
ABORT_CASES: Final = ("tool_cooperative", "tool_ignores_signal", "provider")


@attrs.frozen
class Headline:
    """How one metric is summarised: the result key, its unit, and which way is better."""

    key: str
    unit: str
    higher_is_better: bool = False


HEADLINES: Final = {
    "turn": Headline("us_per_turn", "µs/turn"),
    "tool": Headline("us_per_tool_call", "µs/tool call"),
    "concurrent": Headline("runs_per_s", "runs/s", higher_is_better=True),
    "concurrent_rss": Headline("peak_rss_mb", "MB peak RSS (concurrent)"),
    "batch": Headline("batch_wall_ms_median", "ms (K=8 tools sleeping 100 ms)"),
    "stream": Headline("events_per_s", "text deltas/s", higher_is_better=True),
    "memory": Headline("bytes_per_idle_agent", "bytes/idle agent"),
    "abort": Headline("p99_ms_max", "ms settle p99 (worst case)"),
    "transcript": Headline("us_per_turn_longest", "µs/turn, longest transcript"),
    "import": Headline("import_ms", "ms for from pitrio import Agent"),
    "sse": Headline("deltas_per_s", "SSE deltas/s over loopback", higher_is_better=True),
    # from --instructions (pitrio and pi-ai-python only), in the ratios and the chart
    "instr_turn": Headline("per_turn_k4", "instructions/turn (K=4)"),
    "instr_tool": Headline("per_tool_call", "instructions/tool call"),
    "instr_prompt": Headline("one_turn_prompt", "instructions/one-turn prompt"),
}


class HarnessError(Exception):
    """The harness was asked for something it cannot do (a missing peers directory...)."""


@attrs.define
class Settings:
    """One invocation's choices."""

    peers: tuple[str, ...] = ()
    peers_dir: Path = DEFAULT_PEERS_DIR
    rounds: int = 3
    quick: bool = False
    instructions: bool = False
    metrics: tuple[str, ...] = METRICS
    out: Path = DEFAULT_OUT
    timeout: float = 1800.0
    reps: int = 0
    concurrent_reps: int = 0


def _loop_flags(s: Settings, metric: str = "") -> list[str]:
    if metric == "concurrent" and s.concurrent_reps and not s.quick:
        return ["--reps", str(s.concurrent_reps)]
    if s.quick:
        return [
            "--turns", "2", "--k", "2", "--runs", "20", "--conc-turns", "2",
            "--deltas", "200", "--sleep", "0.01", "--batch-k", "4", "--reps", "2",
        ]  # fmt: skip
    return ["--reps", str(s.reps)] if s.reps else []


def subjects_for(metric: str, s: Settings) -> list[str]:
    """Who runs ``metric``: pitrio, and the peers that have it."""
    if metric in LOOP_METRICS:
        return ["pitrio", *s.peers]
    if metric == "sse":
        # the official SDK as the reference, when installed (the `bench` extra)
        return ["pitrio", "openai_sdk"] if importlib.util.find_spec("openai") else ["pitrio"]
    return ["pitrio"]


def command(subject: str, metric: str, s: Settings) -> list[str]:
    """The command line of one measurement."""
    py = sys.executable
    if subject == "pitrio" and metric in (*LOOP_METRICS, "memory"):
        extra = ["--agents", "20"] if s.quick and metric == "memory" else []
        return [
            py, "-m", "benchmarks.bench_loop", metric, "--json", "--model", "minimal",
            *_loop_flags(s, metric), *extra,
        ]  # fmt: skip
    if subject in PEERS:
        return [str(s.peers_dir / "run"), subject, metric, *_loop_flags(s, metric)]
    base = [py, "-m", "benchmarks._workloads", metric]
    if metric == "abort":
        return [*base, *(["--reps", "5"] if s.quick else [])]
    if metric == "transcript":
        return [*base, *(["--lengths", "2,10", "--reps", "2"] if s.quick else [])]
    if metric == "import":
        return [*base, *(["--reps", "1"] if s.quick else [])]
    if metric == "sse":
        client = "openai" if subject == "openai_sdk" else "pitrio"
        return [*base, "--client", client, *(["--deltas", "200", "--reps", "1"] if s.quick else [])]
    raise HarnessError(f"no command for {subject} {metric}")


@attrs.define
class Measurement:
    """One subprocess's outcome."""

    subject: str
    metric: str
    round: int
    result: dict[str, Any]
    peak_rss_mb: float
    wall_s: float
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def run_child(cmd: Sequence[str], timeout: float) -> tuple[int, str, str, float, float]:
    """Run ``cmd``; returns (status, stdout, stderr, peak RSS in MB, wall seconds).

    The peak RSS is the child's own (``os.wait4``), not the harness's.
    """
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, env=env)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            usage.ru_maxrss / 1024.0,
            wall,
        )


def measure(subject: str, metric: str, rnd: int, s: Settings) -> Measurement:
    """One measurement; a failure is recorded as data (``error``), never raised."""
    cmd = command(subject, metric, s)
    status, out, err, rss, wall = run_child(cmd, s.timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    result: dict[str, Any] = {}
    error = None
    if lines:
        try:
            result = json.loads(lines[-1])
        except json.JSONDecodeError as exc:
            error = f"bad JSON line: {exc}"
    if status != 0 or not lines:
        tail = err.strip().splitlines()[-3:]
        error = f"exit status {status}: {' | '.join(tail) or 'no output'}"
        if subject in PEERS:
            error += f" (has `{s.peers_dir / 'run'} setup` been run?)"
    elif "error" in result:
        error = str(result["error"])
    if metric == "transcript" and result.get("lengths"):
        result["us_per_turn_longest"] = result[f"us_per_turn_{result['lengths'][-1]}"]
    return Measurement(subject, metric, rnd, result, round(rss, 1), round(wall, 3), error)


# --------------------------------------------------------------------------------------
# Instruction counts (valgrind's cachegrind)

_IREFS: Final = re.compile(r"I\s+refs:\s+([\d,]+)")


def _irefs(cmd: Sequence[str], timeout: float) -> int:
    vg = [
        "valgrind", "--tool=cachegrind", "--cache-sim=no", "--trace-children=yes",
        "--cachegrind-out-file=/dev/null",
    ]  # fmt: skip
    status, _out, err, _rss, _wall = run_child([*vg, *cmd], timeout)
    counts = [int(m.replace(",", "")) for m in _IREFS.findall(err)]
    if status != 0 or not counts:
        raise HarnessError(f"valgrind run failed ({status}): {err.strip()[-300:]}")
    return sum(counts)


INSTRUCTION_REPS: Final = 11
"""The instruction method: a process running the workload ``INSTRUCTION_REPS`` times minus
one running it once, divided by ``INSTRUCTION_REPS - 1`` (start-up, imports and warm-ups
cancel out). With 3 minus 1 an occasional full garbage collection moved pi-ai-python's
per-turn figure by ±15 %; 11 minus 1 repeats within 0.1 % (issue 21)."""


def write_bytecode(timeout: float) -> None:
    """Import pitrio and the workloads once with ``.pyc`` files written: with
    ``PYTHONDONTWRITEBYTECODE`` set, every measured process would compile pitrio's sources
    again (installed packages such as trio have theirs from pip), and the start-up figures
    would count the compiler."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    modules = ("pitrio", "pitrio.providers", "pitrio.cli", "benchmarks.bench_loop")
    code = "import " + ", ".join((*modules, "benchmarks._workloads"))
    subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, check=False, timeout=timeout,
        capture_output=True,
    )  # fmt: skip


def instructions(s: Settings) -> dict[str, Any]:
    """Instructions per turn (K=4, K=1), per extra tool call ((K8-K1)/(T*7)), for a
    one-turn prompt (T=0: a new agent, ``prompt()``, one text turn) and what that prompt
    costs on top of its turn, and for ``import pitrio`` and ``from pitrio import Agent``
    against ``import trio``.

    Each run's figure is :data:`INSTRUCTION_REPS` reps minus 1 rep (same start-up and
    warm-ups), divided by ``INSTRUCTION_REPS - 1``. Only the subjects that run on CPython
    (pitrio, pi-ai-python): Node's JIT makes counts incomparable.
    """
    turns = 2 if s.quick else 20
    reps = INSTRUCTION_REPS
    out: dict[str, Any] = {"turns": turns, "reps": reps}
    subjects = ["pitrio", *[p for p in s.peers if p == "pi_py_port"]]
    py = sys.executable
    write_bytecode(s.timeout)  # no count includes compiling pitrio
    for subject in subjects:
        per_run: dict[tuple[int, int], float] = {}
        for t, k in ((turns, 1), (turns, 4), (turns, 8), (0, 1)):
            flags = ["--turns", str(t), "--k", str(k)]

            def cmd(n: int, subject: str = subject, flags: list[str] = flags) -> list[str]:
                if subject == "pitrio":
                    return [
                        py, "-m", "benchmarks.bench_loop", "turn", "--json",
                        "--model", "minimal", *flags, "--reps", str(n),
                    ]  # fmt: skip
                return [str(s.peers_dir / "run"), subject, "turn", *flags, "--reps", str(n)]

            print(f"  instructions: {subject} T={t} K={k}", file=sys.stderr, flush=True)
            per_run[t, k] = (_irefs(cmd(reps), s.timeout) - _irefs(cmd(1), s.timeout)) / (reps - 1)
        per_tool_call = (per_run[turns, 8] - per_run[turns, 1]) / (turns * 7)
        one_turn = per_run[0, 1]
        # a run of T tool turns (K=1) and its text turn, less the text turn's prompt: T
        # tool turns; less their K tool calls: what a turn costs on its own
        turn_k0 = (per_run[turns, 1] - one_turn) / turns - per_tool_call
        out[subject] = {
            "per_turn_k4": per_run[turns, 4] / (turns + 1),
            "per_turn_k1": per_run[turns, 1] / (turns + 1),
            "per_tool_call": per_tool_call,
            "one_turn_prompt": one_turn,
            "prompt_extra": one_turn - turn_k0,
        }
    bare = _irefs([py, "-c", "pass"], s.timeout)
    out["pitrio"]["import"] = _irefs([py, "-c", "import pitrio"], s.timeout) - bare
    # ``import pitrio`` loads no module of its own (PEP 562): the kernel a program starts
    # with is what ``Agent`` imports
    agent = _irefs([py, "-c", "from pitrio import Agent"], s.timeout)
    out["pitrio"]["import_agent"] = agent - bare
    out["pitrio"]["import_trio"] = _irefs([py, "-c", "import trio"], s.timeout) - bare
    return out


# --------------------------------------------------------------------------------------
# Summary, ratios, targets


def _value(m: Measurement, metric: str) -> float | None:
    if m.error is not None:
        return None
    if metric == "concurrent_rss":
        return m.peak_rss_mb
    value = m.result.get(HEADLINES[metric].key)
    return float(value) if isinstance(value, int | float) else None


def summarise(measurements: Sequence[Measurement]) -> dict[str, dict[str, dict[str, Any]]]:
    """metric -> subject -> {median, min, max, n, unit}, over the rounds."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for m in measurements:
        names = [m.metric, "concurrent_rss"] if m.metric == "concurrent" else [m.metric]
        for name in names:
            cell = summary.setdefault(name, {}).setdefault(
                m.subject, {"values": [], "errors": [], "unit": HEADLINES[name].unit}
            )
            value = _value(m, name)
            if value is None:
                cell["errors"].append(m.error)
            else:
                cell["values"].append(value)
    for cells in summary.values():
        for cell in cells.values():
            values = cell.pop("values")
            cell["n"] = len(values)
            if values:
                cell.update(median=statistics.median(values), min=min(values), max=max(values))
    return summary


def ratios(summary: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """pitrio against each other subject per metric: > 1 means pitrio is better."""
    out = []
    for metric, cells in summary.items():
        mine = cells.get("pitrio", {}).get("median")
        for subject, cell in cells.items():
            theirs = cell.get("median")
            if subject == "pitrio" or not mine or not theirs or mine <= 0 or theirs <= 0:
                continue  # no ratio of a missing or (a noisy difference) negative figure
            better = theirs / mine
            if HEADLINES[metric].higher_is_better:
                better = mine / theirs
            out.append({"metric": metric, "peer": subject, "pitrio_advantage": better})
    return out


def _median(
    summary: dict[str, dict[str, dict[str, Any]]], metric: str, subject: str
) -> float | None:
    value = summary.get(metric, {}).get(subject, {}).get("median")
    return float(value) if value is not None else None


def _detail(measurements: Sequence[Measurement], metric: str, key: str) -> float | None:
    values = [
        float(m.result[key])
        for m in measurements
        if m.subject == "pitrio" and m.metric == metric and m.error is None and key in m.result
    ]
    return statistics.median(values) if values else None


def targets(
    summary: dict[str, dict[str, dict[str, Any]]],
    measurements: Sequence[Measurement],
    instr: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """Issues 10's and 21's targets, each met, not met or not measured (``met`` None), with
    the figure."""
    out: list[dict[str, Any]] = []

    def add(target: str, met: bool | None, figure: str) -> None:
        out.append({"target": target, "met": met, "figure": figure})

    mine_i = (instr or {}).get("pitrio")
    theirs_i = (instr or {}).get("pi_py_port")
    for key, what in (("per_turn_k4", "per turn (T=20, K=4)"), ("per_tool_call", "per tool call")):
        target = f"≥ 2x fewer instructions than pi-ai-python {what}"
        if mine_i and theirs_i:
            r = theirs_i[key] / mine_i[key]
            add(
                target,
                r >= 2,
                f"{mine_i[key]:,.0f} vs {theirs_i[key]:,.0f} instructions ({r:.2f}x)",
            )
        else:
            add(target, None, "not measured (needs --instructions and --peers pi_py_port)")
    mine, node = _median(summary, "turn", "pitrio"), _median(summary, "turn", "pi_node")
    if mine and node:
        r = mine / node
        add("per-turn wall within 1.2x of Pi on Node", r <= 1.2,
            f"{mine:.0f} vs {node:.0f} µs/turn ({r:.2f}x)")  # fmt: skip
    else:
        add("per-turn wall within 1.2x of Pi on Node", None, "not measured (needs --peers pi_node)")
    mine, port = (
        _median(summary, "concurrent", "pitrio"),
        _median(summary, "concurrent", "pi_py_port"),
    )
    if mine and port:
        r = mine / port
        add("1,000 concurrent runs: ≥ 2x pi-ai-python's runs/s", r >= 2,
            f"{mine:,.0f} vs {port:,.0f} runs/s ({r:.2f}x)")  # fmt: skip
    else:
        add("1,000 concurrent runs: ≥ 2x pi-ai-python's runs/s", None, "not measured")
    mine = _median(summary, "concurrent_rss", "pitrio")
    port = _median(summary, "concurrent_rss", "pi_py_port")
    if mine and port:
        add("1,000 concurrent runs: peak RSS ≤ pi-ai-python's", mine <= port,
            f"{mine:.0f} vs {port:.0f} MB")  # fmt: skip
    else:
        add("1,000 concurrent runs: peak RSS ≤ pi-ai-python's", None, "not measured")
    imp = _median(summary, "import", "pitrio")
    add("from pitrio import Agent ≤ 100 ms", None if imp is None else imp <= 100,
        "not measured" if imp is None else f"{imp:.0f} ms")  # fmt: skip
    helpms = _detail(measurements, "import", "help_process_ms")
    add("python -m pitrio --help ≤ 250 ms", None if helpms is None else helpms <= 250,
        "not measured" if helpms is None else f"{helpms:.0f} ms (whole process)")  # fmt: skip
    batch = _median(summary, "batch", "pitrio")
    sleep = _detail(measurements, "batch", "sleep_ms")
    if batch is not None and sleep is not None:
        add("batch wall ≤ max(tool) + 1 ms", batch <= sleep + 1,
            f"{batch:.1f} ms for tools sleeping {sleep:.0f} ms")  # fmt: skip
    else:
        add("batch wall ≤ max(tool) + 1 ms", None, "not measured")
    _issue21_targets(summary, mine_i, theirs_i, add)
    p99 = _median(summary, "abort", "pitrio")
    if p99 is not None:
        parts = ", ".join(
            f"{case} {_detail(measurements, 'abort', f'{case}_p99_ms') or 0:.2f}"
            for case in ABORT_CASES
        )
        add("abort settle p99 ≤ 5 ms", p99 <= 5, f"worst {p99:.2f} ms (p99: {parts})")
    else:
        add("abort settle p99 ≤ 5 ms", None, "not measured")
    return out


def _issue21_targets(
    summary: dict[str, dict[str, dict[str, Any]]],
    mine_i: dict[str, float] | None,
    theirs_i: dict[str, float] | None,
    add: Callable[[str, bool | None, str], None],
) -> None:
    """Issue 21's: a one-turn prompt, start-up, and Node's throughput in the same sitting."""
    target = "≥ 2x fewer instructions than pi-ai-python for a one-turn prompt"
    if mine_i and theirs_i and "one_turn_prompt" in mine_i and "one_turn_prompt" in theirs_i:
        mine, theirs = mine_i["one_turn_prompt"], theirs_i["one_turn_prompt"]
        extra = f"{mine_i['prompt_extra']:,.0f} vs {theirs_i['prompt_extra']:,.0f}"
        add(target, theirs / mine >= 2,
            f"{mine:,.0f} vs {theirs:,.0f} instructions ({theirs / mine:.2f}x; "
            f"on top of the turn {extra})")  # fmt: skip
    else:
        add(target, None, "not measured (needs --instructions and --peers pi_py_port)")
    target = "from pitrio import Agent ≤ 1.1x import trio (instructions)"
    if mine_i and "import_trio" in mine_i and "import_agent" in mine_i:
        ours, trio_ = mine_i["import_agent"], mine_i["import_trio"]
        add(target, ours / trio_ <= 1.1,
            f"{ours:,.0f} vs {trio_:,.0f} instructions ({ours / trio_:.2f}x)")  # fmt: skip
    else:
        add(target, None, "not measured (needs --instructions)")
    for metric, what in (("concurrent", "runs/s"), ("stream", "deltas/s")):
        target = f"{metric}: ≥ Pi on Node's {what} in the same sitting"
        ours_w, node = _median(summary, metric, "pitrio"), _median(summary, metric, "pi_node")
        if ours_w and node:
            add(target, ours_w >= node,
                f"{ours_w:,.0f} vs {node:,.0f} {what} ({ours_w / node:.2f}x)")  # fmt: skip
        else:
            add(target, None, "not measured (needs --peers pi_node)")


# --------------------------------------------------------------------------------------
# Output: terminal table, JSON, chart, markdown


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def table_rows(
    summary: dict[str, dict[str, dict[str, Any]]], subjects: Sequence[str]
) -> list[list[str]]:
    """One row per metric: the unit, then each subject's median [min-max]."""
    rows = []
    for metric, headline in HEADLINES.items():
        cells = summary.get(metric)
        if not cells:
            continue
        row = [metric, headline.unit]
        for subject in subjects:
            cell = cells.get(subject)
            if cell is None:
                row.append("")
            elif cell.get("median") is None:
                row.append("error")
            elif cell["n"] > 1:
                row.append(f"{_fmt(cell['median'])} [{_fmt(cell['min'])}-{_fmt(cell['max'])}]")
            else:
                row.append(_fmt(cell["median"]))
        rows.append(row)
    return rows


def print_report(report: dict[str, Any]) -> None:
    """The summary, ratios and targets on the terminal (rich if installed)."""
    subjects = report["subjects"]
    headers = ["metric", "unit", *[PEER_LABELS[s] for s in subjects]]
    rows = table_rows(report["summary"], subjects)
    marks = {True: "met", False: "NOT met", None: "not measured"}
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(" | ".join(headers))
        for row in rows:
            print(" | ".join(row))
        for t in report["targets"]:
            print(f"[{marks[t['met']]}] {t['target']}: {t['figure']}")
        return
    console = Console()
    table = Table(title=f"pitrio benchmarks ({report['meta']['rounds']} interleaved rounds)")
    for h in headers:
        table.add_column(h, justify="left" if h in ("metric", "unit") else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    if report["ratios"]:
        ratio_table = Table(title="pitrio's advantage (> 1: pitrio better)")
        for h in ("metric", "peer", "x"):
            ratio_table.add_column(h)
        for r in report["ratios"]:
            ratio_table.add_row(r["metric"], PEER_LABELS[r["peer"]], f"{r['pitrio_advantage']:.2f}")
        console.print(ratio_table)
    styles = {True: "green", False: "red", None: "yellow"}
    for t in report["targets"]:
        style = styles[t["met"]]
        console.print(f"[{style}]{marks[t['met']]:>12}[/{style}]  {t['target']}: {t['figure']}")


def write_chart(report: dict[str, Any], out: Path) -> list[Path]:
    """A bar chart of pitrio's advantage over each peer (PNG and SVG); [] without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    items = report["ratios"]
    fig, ax = plt.subplots(figsize=(9, 0.38 * max(4, len(items)) + 1.4))
    if items:
        labels = [
            f"{r['metric']} ({HEADLINES[r['metric']].unit.split(' (')[0]})"
            f" vs {PEER_LABELS[r['peer']]}"
            for r in items
        ]
        values = [r["pitrio_advantage"] for r in items]
        colours = ["#2a9d4b" if v >= 1 else "#d1495b" for v in values]
        ys = list(range(len(items)))[::-1]
        ax.barh(ys, values, color=colours)
        ax.set_yticks(ys, labels, fontsize=8)
        ax.set_xscale("log")
        ax.axvline(1.0, color="black", linewidth=0.8)
        for y, v in zip(ys, values, strict=True):
            ax.text(v, y, f" {v:.2f}x", va="center", fontsize=7)
    else:
        ax.text(0.5, 0.5, "no peers measured", ha="center", va="center")
    ax.set_xlabel("pitrio's advantage (peer cost / pitrio cost; > 1: pitrio better; log scale)")
    ax.set_title(
        f"pitrio vs peers, {report['meta']['date'][:16].replace('T', ' ')} UTC, "
        f"{report['meta']['rounds']} interleaved rounds"
    )
    fig.tight_layout()
    paths = [out / "ratios.png", out / "ratios.svg"]
    for path in paths:
        fig.savefig(path, dpi=110)
    plt.close(fig)
    return paths


MD_BEGIN: Final = "<!-- BEGIN python -m benchmarks (generated; edit the harness, not this) -->"
MD_END: Final = "<!-- END python -m benchmarks -->"


def markdown(report: dict[str, Any]) -> str:
    """The harness's section of ``results.md``."""
    meta = report["meta"]
    subjects = report["subjects"]
    lines = [
        MD_BEGIN,
        "## One sitting, all workloads (`python -m benchmarks`)",
        "",
        f"Generated by `{meta['command']}` on {meta['date'][:16].replace('T', ' ')} UTC, "
        f"pitrio at `{meta['commit']}`; "
        f"{meta['rounds']} interleaved rounds (each round runs every workload on every subject "
        "in turn, each in a fresh process); each cell is the median over the rounds "
        "[min-max]. Every measurement is the workload's own protocol (median of its reps). "
        f"Machine: {meta['machine']}, load average at start {meta['loadavg']}. "
        "Compare within this table only.",
        "",
        "| metric | unit | " + " | ".join(PEER_LABELS[s] for s in subjects) + " |",
        "| --- | --- | " + " | ".join("---" for _ in subjects) + " |",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(report["summary"], subjects)]
    details = report["pitrio_details"]
    if details:
        lines += ["", "pitrio details (medians over the rounds): " + "; ".join(
            f"{k} {_fmt(v)}" for k, v in details.items()
        ) + "."]  # fmt: skip
    if report["ratios"]:
        lines += ["", "pitrio's advantage (peer cost / pitrio cost; > 1: pitrio better):", ""]
        lines += ["| metric | " + " | ".join(PEER_LABELS[s] for s in subjects[1:]) + " |"]
        lines += ["| --- | " + " | ".join("---" for _ in subjects[1:]) + " |"]
        by = {(r["metric"], r["peer"]): r["pitrio_advantage"] for r in report["ratios"]}
        for metric in HEADLINES:
            if any((metric, s) in by for s in subjects[1:]):
                cells = [
                    f"{by[(metric, s)]:.2f}x" if (metric, s) in by else "" for s in subjects[1:]
                ]
                lines.append(f"| {metric} | " + " | ".join(cells) + " |")
        lines += ["", "![pitrio's advantage over each peer](results/ratios.png)"]
    instr = report.get("instructions")
    if instr:
        who = [s for s in instr if s not in ("turns", "reps")]
        lines += [
            "",
            "Instructions (cachegrind, `--cache-sim=no`; a process running the workload "
            f"{instr.get('reps', 3)} times minus one running it once, divided by "
            f"{instr.get('reps', 3) - 1}; T={instr['turns']}):",
            "",
            "| | " + " | ".join(PEER_LABELS[s] for s in who) + " |",
            "| --- | " + " | ".join("---" for s in who) + " |",
        ]
        for key, label in (
            ("per_turn_k4", "per turn, K=4"),
            ("per_turn_k1", "per turn, K=1"),
            ("per_tool_call", "per extra tool call"),
            ("one_turn_prompt", "one-turn prompt (a new agent, `prompt()`, T=0)"),
            ("prompt_extra", "the prompt on top of its turn"),
            ("import", "`import pitrio`"),
            ("import_agent", "`from pitrio import Agent`"),
            ("import_trio", "`import trio`"),
        ):
            cells = [f"{instr[s][key]:,.0f}" if key in instr[s] else "" for s in who]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        mine_i = instr["pitrio"]
        if mine_i.get("import_trio") and mine_i.get("import_agent"):
            r = mine_i["import_agent"] / mine_i["import_trio"]
            lines += [
                "",
                f"`from pitrio import Agent` is {r:.2f}x `import trio` (each less `python -c "
                "pass`; `import pitrio` alone loads no module of its own).",
            ]
    lines += ["", "Targets (issues 10 and 21):", ""]
    marks = {True: "**met**", False: "**not met**", None: "not measured"}
    lines += [f"- {marks[t['met']]}: {t['target']} — {t['figure']}" for t in report["targets"]]
    errors = [m for m in report["measurements"] if m["error"]]
    if errors:
        lines += ["", "Failed measurements (recorded as data):", ""]
        lines += [
            f"- {m['subject']} {m['metric']} round {m['round']}: {m['error']}" for m in errors
        ]
    lines.append(MD_END)
    return "\n".join(lines) + "\n"


def update_markdown(path: Path, section: str) -> None:
    """Replace the harness's section of ``path`` (or insert it after the title)."""
    text = path.read_text() if path.exists() else "# Results\n"
    if MD_BEGIN in text and MD_END in text:
        head, _, rest = text.partition(MD_BEGIN)
        _, _, tail = rest.partition(MD_END)
        text = head + section.rstrip("\n") + tail
    else:
        title, sep, body = text.partition("\n")
        text = f"{title}{sep}\n{section}\n{body.lstrip(chr(10))}"
    path.write_text(text)


def _meta(s: Settings, argv: Sequence[str]) -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = "unknown"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": "python -m benchmarks " + " ".join(argv),
        "commit": commit or "unknown",
        "rounds": s.rounds,
        "quick": s.quick,
        "python": sys.version.split()[0],
        "machine": (
            f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
        ),
        "loadavg": " ".join(f"{x:.2f}" for x in load),
        "peers_dir": str(s.peers_dir) if s.peers else None,
    }


def _save_partial(out: Path, meta: dict[str, Any], measurements: Sequence[Measurement]) -> None:
    """The measurements so far (``partial.json``), so an interrupted sitting is not lost."""
    out.mkdir(parents=True, exist_ok=True)
    record = {"meta": meta, "measurements": [m.to_json() for m in measurements]}
    (out / "partial.json").write_text(json.dumps(record, ensure_ascii=False) + "\n")


def run(s: Settings, argv: Sequence[str] = ()) -> dict[str, Any]:
    """Measure everything ``s`` asks for; returns the report (also written to ``s.out``)."""
    if s.peers:
        if not (s.peers_dir / "run").is_file():
            raise HarnessError(
                f"--peers: no peers-bench at {s.peers_dir} (expected {s.peers_dir / 'run'}); "
                "pass --peers-dir PATH to the peers-bench checkout, then run "
                "`PATH/run setup` once"
            )
        unknown = sorted(set(s.peers) - set(PEERS))
        if unknown:
            raise HarnessError(f"unknown peers {unknown}; choose from {', '.join(PEERS)}")
    if s.instructions and shutil.which("valgrind") is None:
        raise HarnessError("--instructions needs valgrind on PATH (apt-get install valgrind)")
    meta = _meta(s, argv)
    write_bytecode(s.timeout)
    measurements: list[Measurement] = []
    for rnd in range(1, s.rounds + 1):
        for metric in s.metrics:
            for subject in subjects_for(metric, s):
                m = measure(subject, metric, rnd, s)
                measurements.append(m)
                _save_partial(s.out, meta, measurements)
                shown = m.error or f"{_fmt(_value(m, metric))} {HEADLINES[metric].unit}"
                print(
                    f"[round {rnd}/{s.rounds}] {metric:>10} {PEER_LABELS[subject]:>14}: {shown}"
                    f" ({m.wall_s:.1f} s)",
                    file=sys.stderr,
                    flush=True,
                )
    instr = None
    if s.instructions:
        try:
            instr = instructions(s)
        except HarnessError as exc:  # recorded, not raised: the wall-clock rounds stand
            meta["instructions_error"] = str(exc)
            print(f"instructions: {exc}", file=sys.stderr)
    return write_outputs(build_report(meta, measurements, instr), s.out)


def build_report(
    meta: dict[str, Any], measurements: Sequence[Measurement], instr: dict[str, Any] | None
) -> dict[str, Any]:
    """The summary, ratios, details and targets of one sitting's measurements."""
    summary = summarise(measurements)
    present = {m.subject for m in measurements}
    subjects = [x for x in ("pitrio", *PEERS, "openai_sdk") if x in present]
    details: dict[str, float] = {}
    for metric, keys in (
        ("abort", tuple(f"{case}_{q}_ms" for case in ABORT_CASES for q in ("p50", "p99"))),
        ("transcript", ("us_per_turn_10", "us_per_turn_100", "us_per_turn_1000")),
        ("import", ("help_process_ms", "bare_python_process_ms")),
        ("memory", ("bytes_per_empty_agent",)),
        ("tool", ("us_per_turn_k0_extrapolated",)),
    ):
        for key in keys:
            value = _detail(measurements, metric, key)
            if value is not None:
                details[f"{metric}.{key}"] = value
    found = ratios(summary)
    mine_i, theirs_i = (instr or {}).get("pitrio"), (instr or {}).get("pi_py_port")
    if mine_i and theirs_i:
        for metric, key in (
            ("instr_turn", "per_turn_k4"),
            ("instr_tool", "per_tool_call"),
            ("instr_prompt", "one_turn_prompt"),
        ):
            if key not in mine_i or key not in theirs_i:
                continue  # a sitting recorded before the row existed
            found.append(
                {
                    "metric": metric,
                    "peer": "pi_py_port",
                    "pitrio_advantage": theirs_i[key] / mine_i[key],
                }
            )
    return {
        "meta": meta,
        "subjects": subjects,
        "summary": summary,
        "ratios": found,
        "pitrio_details": details,
        "instructions": instr,
        "targets": targets(summary, measurements, instr),
        "measurements": [m.to_json() for m in measurements],
    }


def write_outputs(report: dict[str, Any], out: Path) -> dict[str, Any]:
    """``latest.json`` and the chart in ``out``; returns the report with the chart's paths."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "latest.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    (out / "partial.json").unlink(missing_ok=True)
    report["chart"] = [str(p) for p in write_chart(report, out)]
    return report


def rebuild(path: Path, out: Path) -> dict[str, Any]:
    """The report of a sitting recorded in ``path`` (``latest.json`` or ``partial.json``),
    recomputed with this version of the harness and written to ``out``."""
    try:
        record = json.loads(path.read_text())
        measurements = [Measurement(**m) for m in record["measurements"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise HarnessError(f"--from-json {path}: not a harness record ({exc})") from exc
    return write_outputs(
        build_report(record["meta"], measurements, record.get("instructions")), out
    )
