"""How ``piw test`` reports its cases: plain lines for people, one JSON object for tools, JUnit XML for CI.

The shapes are in ``docs/cli.md`` ("piw test"). Text a workflow or model produced (outputs, prompts) reaches the
terminal only through :func:`piw.terminal.sanitize_terminal_text`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from piw.cases.files import shown
from piw.cases.suite import CaseResult
from piw.terminal import sanitize_terminal_text


def case_lines(result: CaseResult) -> list[str]:
    """A case's verdict line, then (indented) what differed or why it is broken."""
    label = {"pass": "PASS", "fail": "FAIL", "broken": "BROKEN"}[result.verdict]
    lines = [f"{label:<6} {result.name}  ({result.seconds:.2f} s)"]
    if result.broken:
        lines.append(f"       {result.broken}")
    for difference in result.differences:
        lines.append(f"       {difference.headline()}:")
        lines.extend(f"         {line}" for line in difference.text.splitlines())
    return [sanitize_terminal_text(line) for line in lines]


def counts(results: Sequence[CaseResult]) -> dict[str, int]:
    return {
        verdict: sum(1 for r in results if r.verdict == verdict) for verdict in ("pass", "fail", "broken")
    }


def summary_line(results: Sequence[CaseResult]) -> str:
    tally = counts(results)
    requests = sum(r.requests for r in results)
    noun = "case" if len(results) == 1 else "cases"
    return (
        f"{len(results)} {noun}: {tally['pass']} passed, {tally['fail']} failed, {tally['broken']} broken "
        f"({requests} replayed replies, 0 model requests)"
    )


def exit_code(results: Sequence[CaseResult]) -> int:
    """2 when any case is broken, else 1 when any failed, else 0."""
    tally = counts(results)
    return 2 if tally["broken"] else 1 if tally["fail"] else 0


def results_json(results: Sequence[CaseResult]) -> dict[str, Any]:
    """``piw test --json``: every case and the counts."""
    tally = counts(results)
    return {
        "cases": [
            {
                "name": r.name,
                "folder": shown(r.folder),
                "verdict": r.verdict,
                "seconds": round(r.seconds, 3),
                "broken": r.broken,
                "differences": [{"kind": d.kind, "node": d.node, "text": d.text} for d in r.differences],
            }
            for r in results
        ],
        "passed": tally["pass"],
        "failed": tally["fail"],
        "broken": tally["broken"],
    }


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
"""Characters XML 1.0 cannot hold at all (a model's output may contain them)."""


def _xml(text: str | None) -> str:
    return _NOT_XML.sub("\ufffd", text or "")


def write_junit(path: Path, results: Sequence[CaseResult]) -> None:
    """JUnit XML: one ``testsuite`` named ``piw``, a ``testcase`` per case (``failure`` or ``error`` inside)."""
    import xml.etree.ElementTree as ElementTree  # (only with --junit: the XML parser is 10 ms of start-up)

    tally = counts(results)
    suite = ElementTree.Element(
        "testsuite",
        name="piw",
        tests=str(len(results)),
        failures=str(tally["fail"]),
        errors=str(tally["broken"]),
        time=f"{sum(r.seconds for r in results):.3f}",
    )
    for result in results:
        element = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"piw.{result.folder.parent.name}",
            name=result.name,
            time=f"{result.seconds:.3f}",
        )
        if result.verdict == "broken":
            ElementTree.SubElement(element, "error", message=_xml(result.broken)).text = _xml(result.broken)
        elif result.verdict == "fail":
            headlines = ", ".join(d.headline() for d in result.differences)
            body = "\n".join(f"{d.headline()}:\n{d.text}" for d in result.differences)
            ElementTree.SubElement(element, "failure", message=_xml(headlines)).text = _xml(body)
    root = ElementTree.Element("testsuites")
    root.append(suite)
    ElementTree.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ElementTree.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
