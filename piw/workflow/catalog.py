"""The built-in catalog: include another built-in by id (``builtins.md`` B14).

``include("plain-summary", ...)`` resolves only within ``workflows/builtins/``, never to a same-named file in the
project or user folders, so a built-in always mounts the catalog's own child whatever the current directory
holds. Definitions are cached by file content: every include of one id in a process is the same object, which
keeps include-cycle detection (by identity) meaningful and avoids importing a file once per mount.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

from piw.errors import DefinitionError, LoadError
from piw.wire import sha256_hex
from piw.workflow.definition import WorkflowDefinition

BUILTIN_ID = re.compile(r"[a-z][a-z0-9-]{0,63}")

_cache: dict[tuple[str, str], WorkflowDefinition] = {}
_loading: list[str] = []
_lock = threading.RLock()


def builtin_definition(builtin_id: str) -> WorkflowDefinition:
    """The built-in ``builtin_id`` from the catalog; an unknown id or an include cycle is a ``DefinitionError``."""
    from piw.workflow.loader import SUFFIX, builtins_dir, import_definition

    if not isinstance(builtin_id, str) or not BUILTIN_ID.fullmatch(builtin_id):
        raise DefinitionError(f"include({builtin_id!r}): a built-in id is lower-case letters, digits and '-'")
    path = builtins_dir() / f"{builtin_id}{SUFFIX}"
    if not path.is_file():
        known = ", ".join(sorted(p.name.removesuffix(SUFFIX) for p in builtins_dir().glob(f"*{SUFFIX}")))
        raise DefinitionError(f"include({builtin_id!r}): no built-in has that id (built-ins: {known})")
    with _lock:
        if builtin_id in _loading:
            chain = " → ".join([*_loading[_loading.index(builtin_id) :], builtin_id])
            raise DefinitionError(f"include({builtin_id!r}) forms an include cycle ({chain})")
        key = (str(path.resolve()), sha256_hex(_read(path)))
        cached = _cache.get(key)
        if cached is not None:
            return cached
        _loading.append(builtin_id)
        try:
            definition = import_definition(path)
        finally:
            _loading.pop()
        _cache[key] = definition
        return definition


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({exc.strerror}).") from None
