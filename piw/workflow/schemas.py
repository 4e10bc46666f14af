"""A model's JSON Schema, made once per class.

pydantic builds ``model_json_schema()`` anew on every call (about a millisecond for a small model, more for a nested
one), and a run asked for it once per node when its definition was snapshotted and three times per agent attempt
(the contract text, the typed ``workflow`` tool, the object check): a fifth of an offline replay's time
(``bench/bench_piw_test.py``). Callers get a copy, so none can change what another sees.
"""

from __future__ import annotations

import copy
import threading
import weakref
from typing import Any

from pydantic import BaseModel

_schemas: weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model.model_json_schema()``, computed on the first call for this class."""
    with _lock:
        cached = _schemas.get(model)
    if cached is None:
        cached = model.model_json_schema()
        with _lock:
            _schemas[model] = cached
    return copy.deepcopy(cached)
