"""What one CLI test call costs: ``piw`` in process (the ``cli`` fixture) versus a real ``piw`` subprocess.

Run ``python bench/bench_cli_fixture.py`` (``--calls N``; ``--mode inprocess|subprocess`` runs one side only,
for a whole-process timer such as ``hyperfine``). For each mode it makes the calls most CLI tests make —
``piw run hello --json`` then ``piw inspect -1 --json`` — in a fresh ``PIW_HOME``, and prints the median wall
time per call and the process CPU time the whole loop used. The in-process side is
``tests/support/inprocess.run_piw``, exactly what ``cli(...)`` runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.inprocess import run_piw  # noqa: E402  (the test helper, from the repository)

PIW = [str(Path(sys.executable).with_name("piw"))]
CALLS = (("run", "hello", "--json"), ("inspect", "-1", "--json"))


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "PIW_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "100"}


def _inprocess(args: tuple[str, ...], env: dict[str, str]) -> int:
    return run_piw(args, env=env).returncode


def _subprocess(args: tuple[str, ...], env: dict[str, str]) -> int:
    return subprocess.run([*PIW, *args], env=env, capture_output=True, text=True, check=False).returncode


def measure(mode: str, calls: int) -> tuple[float, float]:
    """(median ms per call, CPU seconds of this process and its children for the loop)."""
    call: Callable[[tuple[str, ...], dict[str, str]], int] = (
        _inprocess if mode == "inprocess" else _subprocess
    )
    with tempfile.TemporaryDirectory() as tmp:
        env = _env(Path(tmp))
        call(CALLS[0], env)  # warm: imports, the first bundle
        before = _cpu()
        times = []
        for index in range(calls):
            args = CALLS[index % len(CALLS)]
            start = time.perf_counter()
            code = call(args, env)
            times.append((time.perf_counter() - start) * 1000)
            if code != 0:
                raise SystemExit(f"piw {' '.join(args)} exited {code}")
        return statistics.median(times), _cpu() - before


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--mode", choices=("inprocess", "subprocess", "both"), default="both")
    options = parser.parse_args()
    modes = ("inprocess", "subprocess") if options.mode == "both" else (options.mode,)
    results = {mode: measure(mode, options.calls) for mode in modes}
    for mode, (median_ms, cpu_s) in results.items():
        print(f"{mode:<11} {median_ms:8.1f} ms/call (median of {options.calls})  {cpu_s:6.2f} s CPU in total")
    if len(results) == 2:
        ratio = results["subprocess"][0] / results["inprocess"][0]
        print(f"a subprocess call costs {ratio:.1f}x an in-process call")


if __name__ == "__main__":
    main()
