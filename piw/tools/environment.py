"""The environment agent tools start with: a small allow-list, never piw's own environment.

A tool such as ``bash`` runs what the model writes, and the model reads its output; with the full environment,
``echo $OPENAI_API_KEY`` would hand it the key. Tools therefore start with only the variables a shell needs to
work (``PATH``, ``HOME``, the locale, the terminal type, ``TMPDIR``, …). An author adds names with
:func:`allow_env` in the workflow file; a user adds them for one machine with ``[agent] tool_env`` in
``config.toml``. Values are read from piw's environment when the tool starts.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping

from piw.errors import DefinitionError

BASE_ALLOWED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "TMPDIR",
)
"""What every tool process gets: enough for ordinary commands, nothing that authorizes anything."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_lock = threading.Lock()
_allowed: set[str] = set()


def allow_env(*names: str) -> None:
    """Pass these environment variables on to agent tool processes too (in a workflow file, like ``register``)."""
    for name in names:
        if not isinstance(name, str) or not _NAME.match(name):
            raise DefinitionError(f"allow_env name {name!r} is not an environment variable name.")
    with _lock:
        _allowed.update(names)


def allowed_names(extra: Iterable[str] = ()) -> list[str]:
    """Every allowed name: the base list, the authors' and ``extra`` (from ``[agent] tool_env``), sorted."""
    with _lock:
        return sorted({*BASE_ALLOWED, *_allowed, *extra})


def tool_environment(extra: Iterable[str] = (), source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a tool process starts with: the allowed names that are set, nothing else."""
    environment = os.environ if source is None else source
    return {name: environment[name] for name in allowed_names(extra) if name in environment}
