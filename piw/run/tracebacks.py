"""Where a node's exception came from: the traceback frames of the workflow's own files, secrets removed.

A failure such as ``KeyError: 'frist'`` says nothing about where it happened. The engine records, in the
``node_failed`` event's optional ``traceback`` field, the frames of the exception that lie in the run's workflow
files (the main file and every included one), outermost first: ``{file, line, function, code}``. Frames inside
piw, the standard library or third-party packages are left out, so the detail stays short and stable, and locals
are never recorded. Values of secret-looking environment variables (API keys, tokens, passwords) are replaced by
``[redacted]`` in the frames and in the error line, so a workflow that raises with a key in its message does not
write that key into the trace.
"""

from __future__ import annotations

import os
import re
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MAX_FRAMES = 30
"""A deep recursion in workflow code keeps its innermost frames."""
MAX_CODE = 300

_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
_MIN_SECRET = 8
"""Shorter values (``1``, ``true``) would redact ordinary text."""


def workflow_files(paths: Iterable[str | Path | None]) -> frozenset[str]:
    """The resolved paths of a run's workflow files (``None`` entries are skipped)."""
    return frozenset(str(Path(path).resolve()) for path in paths if path)


def _chain(exc: BaseException) -> Iterable[BaseException]:
    """The exception, then what it was raised from or during (a wrapper's frames may all be piw's)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look secret, longest first (so overlaps redact fully)."""
    env = os.environ if environ is None else environ
    values = {value for name, value in env.items() if _SECRET_NAME.search(name) and len(value) >= _MIN_SECRET}
    return sorted(values, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    """``text`` with every secret value replaced by ``[redacted]``."""
    for value in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, "[redacted]")
    return text


def workflow_traceback(exc: BaseException, files: frozenset[str]) -> list[dict[str, Any]]:
    """The frames of ``exc`` (or of the exception it wraps) that lie in ``files``, outermost first."""
    secrets = secret_values()
    for link in _chain(exc):
        frames = []
        for frame in traceback.extract_tb(link.__traceback__):
            try:
                resolved = str(Path(frame.filename).resolve())
            except (OSError, ValueError):
                continue
            if resolved not in files:
                continue
            code = redact((frame.line or "").strip(), secrets)
            frames.append(
                {"file": resolved, "line": frame.lineno or 0, "function": frame.name, "code": code[:MAX_CODE]}
            )
        if frames:
            return frames[-MAX_FRAMES:]
    return []
