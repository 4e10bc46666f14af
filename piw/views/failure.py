"""Where a failure happened: ``file:line`` for one-line displays and the whole workflow traceback for detail.

The frames come from ``node_failed.traceback`` (``StepRecord.traceback``): only the workflow's own files,
outermost first, each ``{file, line, function, code}``. Every piece is workflow data, so it is sanitised here
like any other text before it reaches a terminal.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.text import Text

from piw.store.state import RunState, StepRecord
from piw.terminal import single_line


def where(frames: Sequence[dict[str, Any]] | None) -> str | None:
    """``flow.workflow.py:7``: the innermost workflow frame, or ``None`` without one."""
    if not frames:
        return None
    frame = frames[-1]
    name = Path(str(frame.get("file", ""))).name or "?"
    return single_line(f"{name}:{frame.get('line', '?')}")


def traceback_lines(
    frames: Sequence[dict[str, Any]] | None, error: str | None, indent: str = ""
) -> Iterator[Text]:
    """The traceback as Python prints it, limited to workflow frames, ending with the error line."""
    if frames:
        yield Text(f"{indent}Traceback (workflow frames, most recent call last):", style="dim")
        for frame in frames:
            file, line = single_line(str(frame.get("file", "?"))), frame.get("line", "?")
            function = single_line(str(frame.get("function", "?")))
            yield Text(f'{indent}  File "{file}", line {line}, in {function}', style="dim")
            code = single_line(str(frame.get("code") or ""))
            if code:
                yield Text(f"{indent}    {code}")
    if error:
        for part in str(error).splitlines() or [""]:
            yield Text(indent + single_line(part), style="red")


def failed_step(state: RunState) -> StepRecord | None:
    """The step whose failure ended the run: the last failed step, when the run's error comes from it."""
    if state.status not in ("failed", "timed_out", "cancelled") or not state.steps:
        return None
    step = state.steps[-1]
    if step.outcome == "ok":
        return None
    if state.error and step.error and step.error not in state.error:
        return None
    return step
