"""What one offline ``piw test`` case costs: a 5-step agent workflow replayed from its recorded replies.

Run ``python bench/bench_piw_test.py`` (``--runs N``, ``--cases N``). It writes a project in a temporary folder
(a workflow of five structured agent steps and its replies), runs it once on the scripted provider, records the run
with ``piw test record``, copies the case ``--cases`` times, then prints:

- one ``piw test`` process replaying one case, start-up included (median wall time of ``--runs`` processes): the
  figure the target of issue 32 names (≤ 0.3 s);
- per case inside one ``piw test`` process over ``--cases`` cases, with ``-j 1`` and ``-j 2`` (per case: the
  process's wall time over the cases, start-up included).

Each figure is wall seconds and, in brackets, CPU seconds of the ``piw`` process (on a loaded machine the wall
figure measures the load). ``--baseline PIW`` (another checkout's ``piw`` executable) times that ``piw`` on the same
cases, its runs taken in turn with this checkout's, and prints its figures beside them.

``--prepare DIR`` only writes the project and the case into ``DIR`` and prints the command to time with
``farm-bench`` (``farm-bench -n 10 -- piw test DIR/piw-tests/five``, run from ``DIR``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PIW = str(Path(sys.executable).with_name("piw"))
STEPS = ("gather", "sort", "weigh", "decide", "word")
WORKFLOW = '''"""Five structured agent steps in a row (bench/bench_piw_test.py)."""

from pydantic import BaseModel

from piw import agent, define_workflow, edge


class Note(BaseModel):
    step: str
    text: str


workflow = define_workflow(
    name="five",
    start_at="gather",
    nodes={
        name: agent(prompt=f"Step {name}: add one sentence to the notes so far.", expected_output=Note)
        for name in STEPS
    },
    edges=[edge(a, b) for a, b in zip(STEPS[:-1], STEPS[1:])],
)
'''.replace("STEPS", repr(STEPS))


def _piw(*args: str, cwd: Path, env: dict[str, str], piw: str = PIW) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([piw, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"piw {' '.join(args)} exited {done.returncode}: {done.stderr or done.stdout}")
    return done


def _timed(piw: str, *args: str, cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one ``piw`` process (CPU: its user + system time, the children's rusage before and
    after it), and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = _piw(*args, cwd=cwd, env=env, piw=piw)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.stdout


def prepare(project: Path, home: Path, copies: int = 1) -> dict[str, str]:
    """The project, one real run of it and its case ``piw-tests/five`` (plus ``copies - 1`` copies); the env."""
    (project / "workflows").mkdir(parents=True, exist_ok=True)
    (project / "workflows" / "five.workflow.py").write_text(WORKFLOW, encoding="utf-8")
    replies = {name: [{"submit": {"step": name, "text": f"Notes after {name}."}}] for name in STEPS}
    (project / "workflows" / "five.replies.json").write_text(json.dumps(replies), encoding="utf-8")
    env = {**os.environ, "PIW_HOME": str(home), "NO_COLOR": "1"}
    _piw("run", "workflows/five.workflow.py", "--provider", "scripted", "--json", cwd=project, env=env)
    _piw("test", "record", "latest", "--name", "five", cwd=project, env=env)
    for index in range(1, copies):
        shutil.copytree(project / "piw-tests" / "five", project / "piw-tests" / f"five-{index}")
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="piw test processes timed (one case each)")
    parser.add_argument("--cases", type=int, default=20, help="cases replayed in one process")
    parser.add_argument("--prepare", type=Path, help="only write the project and case into this folder")
    parser.add_argument(
        "--baseline", help="another piw executable to time beside this one, on the same cases"
    )
    options = parser.parse_args()
    if options.prepare:
        options.prepare.mkdir(parents=True, exist_ok=True)
        prepare(options.prepare, options.prepare / "home")
        print(
            f"cd {options.prepare} && PIW_HOME={options.prepare / 'home'} farm-bench -n 10 -- {PIW} test piw-tests/five"
        )
        return
    sides = {"this": PIW, **({"baseline": options.baseline} if options.baseline else {})}
    with tempfile.TemporaryDirectory(prefix="piw-bench-test-") as scratch:
        project, home = Path(scratch) / "project", Path(scratch) / "home"
        env = prepare(project, home, copies=options.cases)
        print(f"load average {' '.join(f'{load:.1f}' for load in os.getloadavg())} on {os.cpu_count()} cores")
        for piw in sides.values():
            _piw("test", "piw-tests/five", cwd=project, env=env, piw=piw)  # warm the byte-code cache
        single: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        for _ in range(options.runs):
            for side, piw in sides.items():  # in turn, so a change in the machine's load hits both
                wall, cpu, _ = _timed(piw, "test", "piw-tests/five", cwd=project, env=env)
                single[side].append((wall, cpu))
        print(
            f"one case, one piw test process (start-up included; target <= 0.3 s), median of {options.runs}:"
        )
        for side, times in single.items():
            walls = [wall for wall, _ in times]
            print(
                f"  {side:<9} wall {statistics.median(walls):.3f} s (min {min(walls):.3f}, max {max(walls):.3f}), "
                f"cpu {statistics.median(cpu for _, cpu in times):.3f} s"
            )
        for jobs in (1, 2):
            print(f"{options.cases} cases in one process, -j {jobs}, per case (process time / cases):")
            for side, piw in sides.items():
                wall, cpu, out = _timed(
                    piw, "test", "piw-tests", "-j", str(jobs), "--json", cwd=project, env=env
                )
                cases = json.loads(out)["cases"]
                inner = statistics.median(case["seconds"] for case in cases)
                print(
                    f"  {side:<9} {wall / len(cases):.3f} s wall, {cpu / len(cases):.3f} s cpu per case "
                    f"(process wall {wall:.2f} s; median case {inner:.3f} s inside the process)"
                )


if __name__ == "__main__":
    main()
