"""A host running many runs at once: ``piw host --concurrency N`` beside a DBOS queue on SQLite, same run.

    python bench/bench_host_throughput.py [--runs 1000] [--concurrency 1 4 8 16] [--repeat 3] [--dbos-poll 0.01]
    python bench/bench_host_throughput.py --prepare DIR [--runs 1000]
    python bench/bench_host_throughput.py --side piw|dbos --from DIR --concurrency N [--poll S] [--out FILE]

``--runs`` runs of a 3-step workflow (a compute step, a shell step running ``true``, a compute step) are queued
before the worker starts: ``piw run --detach``'s own code queues them into a ``PIW_HOME`` (the template), and the
anchor ``bench/anchors/dbos_queue.py`` enqueues the same workflow (two trivial ``@DBOS.step``s around one that runs
``subprocess.run(["true"])``) into a DBOS SQLite system database. Each measurement copies the template, starts
the worker process — ``piw host --once --concurrency N``, or a DBOS process whose queue has
``worker_concurrency=N`` and polls every ``--dbos-poll`` seconds (default 0.01 s, DBOS's best here: its queue only
polls, a finished workflow does not wake it, so under its own default of 1 s it starts at most N workflows a
second — 1,000 runs at N = 1 take over 16 minutes; ``--dbos-poll 1.0`` measures that too) —
and waits until every run is done. Per measurement it prints:

- **runs/s**: runs over the time from the worker's spawn to the last run done (start-up included), and
  ``after start-up``: from the first run done to the last;
- **p50/p99 queue-to-done**: every run was queued before the worker started, so a run's latency is its done time
  minus the worker's spawn (piw: ``run_completed``'s ``at``, millisecond resolution; DBOS: ``time.time()`` at the
  end of the workflow);
- **RSS**: the worker process's peak resident memory (``wait4``'s ``ru_maxrss``; piw's shell children excluded);
- **counted**: piw: every run's trace holds exactly one ``run_completed`` with the expected output, and exactly one
  ``node_started`` and ``process_started`` of the shell step, and every queue row is ``done``; DBOS: each
  workflow's output and its subprocess step counted once in the worker, and the system database's SUCCESS rows;
- the load average when it started (``os.getloadavg``): the machine is shared, figures move with it.

Each ``--concurrency`` is measured ``--repeat`` times, piw and DBOS in turn; the summary gives min/median/max.
``--side`` runs one measurement of a prepared ``DIR`` (``--prepare``) and prints its JSON, for a whole-process
timer. Not a test: figures only (``bench/README.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PIW = [sys.executable, "-c", "import sys; from piw.cli.main import main; sys.argv[0] = 'piw'; main()"]
WORKFLOW = """
from piw import compute, define_workflow, edge, shell

workflow = define_workflow(
    name="three",
    start_at="first",
    nodes={
        "first": compute(lambda ctx: {"n": ctx.input["n"]}),
        "shell": shell({"command": "true"}),
        "last": compute(lambda ctx: {"n": ctx.outputs["first"]["n"] + 1}),
    },
    edges=[edge("first", "shell"), edge("shell", "last")],
)
"""


def _env(home: Path) -> dict[str, str]:
    # Byte-compiled modules, as an installed piw has them (bench/targets.py's piw_env says why).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIW_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PIW_HOME=str(home), COLUMNS="100")
    return env


def _dbos_python() -> Path:
    sys.path.insert(0, str(HERE))
    from targets import venv_python

    return venv_python("dbos")


# ---- the template: runs queued before any worker starts -------------------------------------------------------


def prepare(folder: Path, runs: int) -> None:
    """``folder/piw-home`` with ``runs`` queued runs, ``folder/dbos.sqlite`` with as many enqueued workflows."""
    folder.mkdir(parents=True, exist_ok=True)
    flow = folder / "three.workflow.py"
    flow.write_text(WORKFLOW.lstrip(), encoding="utf-8")
    home = folder / "piw-home"
    queuer = f"""
import sys
from pathlib import Path
from piw.run.runner import ForegroundOptions, queue_run
for n in range({runs}):
    queue_run({str(flow)!r}, Path({str(home)!r}), {{"n": n}}, None, ForegroundOptions(record_origin=False))
"""
    home.mkdir()
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", queuer], env=_env(home), check=True)
    print(f"  … queued {runs} piw runs in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
    dbos = [str(_dbos_python()), str(HERE / "anchors" / "dbos_queue.py")]
    subprocess.run(
        [*dbos, "prepare", str(folder / "dbos.sqlite"), str(runs), "1", "1.0"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (folder / "runs").write_text(str(runs))


# ---- one measurement ------------------------------------------------------------------------------------------


def _spawn(command: list[str], env: dict[str, str] | None, out: Path) -> tuple[float, int, int]:
    """Start ``command`` (stdout and stderr to ``out``); its spawn time, exit status and peak RSS (kB)."""
    with out.open("wb") as sink:
        spawned = time.time()
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    return spawned, process.returncode, usage.ru_maxrss


def _epoch(at: str) -> float:
    return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


def _piw_counts(home: Path, runs: int) -> tuple[list[float], list[str]]:
    """Every run's done time, and what the traces and the queue say went wrong (nothing, if exactly once)."""
    done: list[float] = []
    wrong: list[str] = []
    bundles = sorted((home / "runs").iterdir())
    if len(bundles) != runs:
        wrong.append(f"{len(bundles)} bundles for {runs} runs")
    for bundle in bundles:
        events = [json.loads(line) for line in (bundle / "trace.ndjson").read_bytes().splitlines()]
        completed = [e for e in events if e["type"] == "run_completed"]
        started = [e for e in events if e["type"] == "node_started" and e.get("nodeId") == "shell"]
        spawned = [e for e in events if e["type"] == "process_started"]
        n = events[0]["payload"]["input"]["n"]
        if len(completed) != 1 or completed[0]["payload"].get("finalOutput") != {"n": n + 1}:
            wrong.append(f"{bundle.name}: {len(completed)} run_completed")
        if len(started) != 1 or len(spawned) != 1:
            wrong.append(f"{bundle.name}: shell step started {len(started)}, process {len(spawned)} times")
        if completed:
            done.append(_epoch(completed[-1]["at"]))
    with sqlite3.connect(home / "piw.sqlite") as conn:
        rows = dict(conn.execute("SELECT status, count(*) FROM run_queue GROUP BY status").fetchall())
    if rows != {"done": runs}:
        wrong.append(f"queue rows {rows}")
    return sorted(done), wrong


def measure_piw(template: Path, concurrency: int, scratch: Path) -> dict[str, Any]:
    runs = int((template / "runs").read_text())
    home = scratch / "piw-home"
    shutil.copytree(template / "piw-home", home, symlinks=True)
    load = os.getloadavg()[0]
    command = [*PIW, "host", "--once", "--concurrency", str(concurrency)]
    spawned, code, rss_kb = _spawn(command, _env(home), scratch / "host.log")
    done, wrong = _piw_counts(home, runs)
    if code != 0:
        wrong.append(f"piw host exited {code}: {(scratch / 'host.log').read_text()[-500:]}")
    return _figures("piw", concurrency, None, spawned, done, rss_kb, load, wrong, runs)


def measure_dbos(template: Path, concurrency: int, poll: float, scratch: Path) -> dict[str, Any]:
    runs = int((template / "runs").read_text())
    db = scratch / "dbos.sqlite"
    shutil.copyfile(template / "dbos.sqlite", db)
    load = os.getloadavg()[0]
    command = [
        str(_dbos_python()),
        str(HERE / "anchors" / "dbos_queue.py"),
        "work",
        str(db),
        str(runs),
        str(concurrency),
        str(poll),
    ]
    out = scratch / "dbos.json"
    with out.open("wb") as sink:
        spawned = time.time()
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.DEVNULL)
        _pid, status, usage = os.wait4(process.pid, 0)
    wrong: list[str] = []
    if os.waitstatus_to_exitcode(status) != 0:
        wrong.append(f"the DBOS worker exited {os.waitstatus_to_exitcode(status)}")
        return _figures("dbos", concurrency, poll, spawned, [], usage.ru_maxrss, load, wrong, runs)
    data = json.loads(out.read_text().strip().splitlines()[-1])
    if data["outputs"] != runs or data["success_rows"] != runs:
        wrong.append(f"{data['outputs']} outputs, {data['success_rows']} SUCCESS rows for {runs} runs")
    if data["shell_counts"] != [1] or data["shell_runs"] != runs:
        wrong.append(f"subprocess step ran {data['shell_runs']} times, per workflow {data['shell_counts']}")
    return _figures("dbos", concurrency, poll, spawned, data["done_at"], usage.ru_maxrss, load, wrong, runs)


def _figures(
    side: str,
    concurrency: int,
    poll: float | None,
    spawned: float,
    done: list[float],
    rss_kb: int,
    load: float,
    wrong: list[str],
    runs: int,
) -> dict[str, Any]:
    latencies = sorted(max(0.0, at - spawned) for at in done)
    if not latencies:
        latencies = [float("nan")]
    return {
        "side": side,
        "concurrency": concurrency,
        "poll_s": poll,
        "runs": runs,
        "runs_per_s": len(done) / latencies[-1] if done else 0.0,
        "after_startup_per_s": (len(done) - 1) / (done[-1] - done[0]) if len(done) > 1 else 0.0,
        "p50_s": statistics.median(latencies),
        "p99_s": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "rss_mb": rss_kb / 1024,
        "load": load,
        "wrong": wrong,
    }


# ---- the table ------------------------------------------------------------------------------------------------


def _label(result: dict[str, Any]) -> str:
    return "piw host" if result["side"] == "piw" else f"DBOS poll {result['poll_s']:g} s"


def _spread(values: list[float], digits: int = 1) -> str:
    return f"{min(values):.{digits}f} / {statistics.median(values):.{digits}f} / {max(values):.{digits}f}"


def summary(results: list[dict[str, Any]]) -> None:
    print(
        "\nmin / median / max over the repeats; latencies from the worker's spawn (every run queued before it)\n"
    )
    header = f"{'N':>3}  {'worker':<17} {'runs/s':>19} {'after start-up':>19} {'p50 s':>17} {'p99 s':>17}"
    print(f"{header} {'RSS MB':>19} {'load':>15}  counted")
    for concurrency in sorted({r["concurrency"] for r in results}):
        group = [r for r in results if r["concurrency"] == concurrency]
        labels = list(dict.fromkeys(_label(r) for r in group))
        medians: dict[str, float] = {}
        for label in labels:
            rows = [r for r in group if _label(r) == label]
            medians[label] = statistics.median(r["runs_per_s"] for r in rows)
            wrong = sorted({w for r in rows for w in r["wrong"]})
            print(
                f"{concurrency:>3}  {label:<17} {_spread([r['runs_per_s'] for r in rows]):>19} "
                f"{_spread([r['after_startup_per_s'] for r in rows]):>19} "
                f"{_spread([r['p50_s'] for r in rows], 2):>17} {_spread([r['p99_s'] for r in rows], 2):>17} "
                f"{_spread([r['rss_mb'] for r in rows]):>19} {_spread([r['load'] for r in rows]):>15}  "
                f"{'exactly once' if not wrong else '; '.join(wrong)[:200]}"
            )
        best = max((v for k, v in medians.items() if k != "piw host"), default=0.0)
        if "piw host" in medians and best:
            print(
                f"{'':>3}  piw / best DBOS median runs/s: {medians['piw host'] / best:.2f} × (target ≥ 2 ×)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dbos-poll", type=float, nargs="+", default=[0.01])
    parser.add_argument("--prepare", type=Path, help="only write the template into this folder")
    parser.add_argument("--side", choices=("piw", "dbos"), help="one measurement of a prepared --from folder")
    parser.add_argument("--from", dest="template", type=Path)
    parser.add_argument(
        "--poll", type=float, default=1.0, help="with --side dbos: the queue's polling interval"
    )
    parser.add_argument("--out", type=Path, help="with --side: append the JSON line to this file")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare, args.runs)
        return
    if args.side:
        with tempfile.TemporaryDirectory(prefix="piw-hostbench-") as scratch:
            if args.side == "piw":
                result = measure_piw(args.template, args.concurrency[0], Path(scratch))
            else:
                result = measure_dbos(args.template, args.concurrency[0], args.poll, Path(scratch))
        line = json.dumps(result)
        print(line)
        if args.out:
            with args.out.open("a") as sink:
                sink.write(line + "\n")
        return
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="piw-hostbench-") as scratch:
        template = Path(scratch) / "template"
        prepare(template, args.runs)
        for repeat in range(args.repeat):
            for concurrency in args.concurrency:
                sides: list[tuple[str, float | None]] = [
                    ("piw", None),
                    *(("dbos", p) for p in args.dbos_poll),
                ]
                for side, poll in sides:
                    with tempfile.TemporaryDirectory(dir=scratch) as one:
                        if side == "piw":
                            result = measure_piw(template, concurrency, Path(one))
                        else:
                            assert poll is not None
                            result = measure_dbos(template, concurrency, poll, Path(one))
                    results.append(result)
                    print(
                        f"  … {repeat + 1}/{args.repeat} N={concurrency} {_label(result)}: "
                        f"{result['runs_per_s']:.1f} runs/s, p50 {result['p50_s']:.2f} s, "
                        f"p99 {result['p99_s']:.2f} s, RSS {result['rss_mb']:.0f} MB, load {result['load']:.1f}"
                        f"{'' if not result['wrong'] else ' WRONG: ' + '; '.join(result['wrong'])[:300]}",
                        file=sys.stderr,
                        flush=True,
                    )
    summary(results)


if __name__ == "__main__":
    main()
