"""``piw test``: record a run as a test case, run the cases offline, or compare providers on them live.

``piw test record RUN [--name NAME] [--dir piw-tests]`` writes a case folder; ``piw test [DIR…]`` replays every
case under the folders (default ``piw-tests``) against its recorded replies, ``-j N`` at a time; ``--live
--provider A --provider B`` runs them against real providers and prints a table per provider (``docs/testing.md``,
``docs/cli.md`` "piw test"). Exit 0 when every case passes, 1 when any fails, 2 when any is broken.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from piw.cli.app import app
from piw.errors import UsageError
from piw.terminal import json_text, sanitize_terminal_text

if TYPE_CHECKING:
    from piw.cases.suite import CaseResult

DEFAULT_DIR = "piw-tests"


def _say(line: str = "") -> None:
    sys.stdout.write(sanitize_terminal_text(line) + "\n")
    sys.stdout.flush()


@app.command("test")
def test(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            help="Case folders (default: piw-tests), or 'record RUN'.", show_default=False, metavar="DIR"
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="record: the case's name.")] = None,
    directory: Annotated[
        str, typer.Option("--dir", help="record: the test folder the case goes in.")
    ] = DEFAULT_DIR,
    jobs: Annotated[
        int | None, typer.Option("-j", "--jobs", help="Cases run at the same time.", min=1)
    ] = None,
    junit: Annotated[str | None, typer.Option("--junit", help="Also write JUnit XML to FILE.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    accept: Annotated[
        bool, typer.Option("--accept", help="Re-record failing cases' expectations (after showing the diff).")
    ] = False,
    live: Annotated[bool, typer.Option("--live", help="Run the cases against real providers.")] = False,
    provider: Annotated[
        list[str] | None,
        typer.Option("--provider", help="--live: a provider (or provider/model) to compare."),
    ] = None,
    repeat: Annotated[
        int, typer.Option("--repeat", help="--live: runs of each case per provider.", min=1)
    ] = 1,
    budget: Annotated[
        str | None,
        typer.Option("--budget", help="--live: the bake-off's total limit, e.g. cost=0.50,tokens=200k."),
    ] = None,
) -> int:
    """Turn runs into regression tests: 'piw test record RUN' keeps one, 'piw test' replays them offline.

    With --live --provider A --provider B the same cases run against real providers, graded by the same
    expectations, and a table compares them: cases passed, first-try valid structured steps, requests, tokens,
    cost and latency.
    """
    words = list(args or [])
    if words[:1] == ["record"]:
        if accept or live or provider or junit:
            raise UsageError("'piw test record' takes --name and --dir only.")
        if len(words) != 2:
            raise UsageError("Use 'piw test record RUN' (a run id, a unique prefix, latest or -N).")
        return _record(words[1], name, Path(directory), as_json)
    if name is not None or directory != DEFAULT_DIR:
        raise UsageError("--name and --dir are options of 'piw test record RUN'.")
    if not live and (provider or repeat != 1 or budget):
        raise UsageError("--provider, --repeat and --budget apply to 'piw test --live'.")
    if live and jobs is not None:
        raise UsageError("--live runs one run at a time, so its budget holds; leave out -j.")
    folders = _case_folders(words)
    if live:
        if accept:
            raise UsageError("--accept re-records from the offline replay; run it without --live.")
        return _live(folders, provider or [], repeat, budget, as_json, junit)
    return _offline(folders, jobs or min(4, os.cpu_count() or 1), junit, as_json, accept)


def _record(run_ref: str, name: str | None, tests_dir: Path, as_json: bool) -> int:
    from piw.cases.record import record_case
    from piw.store.home import piw_home
    from piw.store.runref import resolve_run_id

    home = piw_home()
    run_id = resolve_run_id(home, run_ref)
    folder = record_case(home, run_id, tests_dir, name)
    if as_json:
        sys.stdout.write(json_text({"runId": run_id, "case": folder.name, "folder": str(folder)}) + "\n")
    else:
        _say(f"Recorded run {run_id} as test case {folder}. Run it with 'piw test {tests_dir}'.")
    return 0


def _case_folders(words: list[str]) -> list[Path]:
    from piw.cases.files import find_cases

    places = [Path(word) for word in words] or [Path(DEFAULT_DIR)]
    for place in places:
        if not place.is_dir():
            hint = " Record one with 'piw test record RUN'." if not words else ""
            raise UsageError(f"No test folder {place}.{hint}")
    folders = find_cases(places)
    if not folders:
        raise UsageError(f"No test cases (folders with case.json) under {', '.join(map(str, places))}.")
    return folders


def _offline(folders: list[Path], jobs: int, junit: str | None, as_json: bool, accept: bool) -> int:
    from piw.cases.report import case_lines, exit_code, results_json, summary_line, write_junit
    from piw.cases.suite import run_cases

    def show(result: CaseResult) -> None:
        if not as_json:
            for line in case_lines(result):
                _say(line)

    results = run_cases(folders, jobs, on_result=show)
    if junit:
        write_junit(Path(junit), results)
    if as_json:
        sys.stdout.write(json_text(results_json(results)) + "\n")
    else:
        _say(summary_line(results))
    if accept:
        _accept(results, as_json)
    return exit_code(results)


def _accept(results: list[CaseResult], as_json: bool) -> None:
    from piw.cases.files import write_case

    for result in results:
        if result.rerecord is None:
            continue
        write_case(result.folder, result.rerecord.case, result.rerecord.expected, result.rerecord.steps)
        if not as_json:
            _say(f"Accepted: re-recorded the expectations of {result.name} (the diff is above).")


def _live(
    folders: list[Path],
    providers: list[str],
    repeat: int,
    budget: str | None,
    as_json: bool,
    junit: str | None,
) -> int:
    from piw.cases.bakeoff import bake_off, table_lines
    from piw.store.home import piw_home
    from piw.workflow.budget import parse_budget

    if not providers:
        raise UsageError("'piw test --live' needs at least one --provider (provider or provider/model).")
    limits = parse_budget(budget) if budget is not None else None
    report = bake_off(piw_home(), folders, providers, repeat, limits, progress=None if as_json else _say)
    if as_json:
        sys.stdout.write(json_text(report.to_json()) + "\n")
    else:
        for line in table_lines(report):
            _say(line)
    if junit:
        from piw.cases.report import write_junit

        write_junit(Path(junit), report.results())
    return report.exit_code()
