"""Serve keys: which workflow version a queued run needs, so a host claims only runs it can load
(``docs/many-machines.md``, "Routing by workflow version"; ``docs/design/multi-host.md`` §4.7).

A run's serve key is the SHA-256 of its workflow's identity *without the path*: a file's content hash (or a
built-in's id and revision) and the definition digest of its flattened graph, mounted children included. So a host
whose copy of the same file lives at another path serves the run, and a host with another version of it never claims
it. Resume still compares the hashes itself: a key only routes, it never lets a mismatch run. Which keys a host
serves is the run layer's business (``piw.run.host_presence``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def serve_key(source: dict[str, Any] | None, digest: str | None) -> str:
    """The serve key of a run of the workflow identified by ``source`` (its ``workflowSource``) and ``digest``."""
    identity = {key: value for key, value in (source or {}).items() if key != "path"}
    text = json.dumps(
        {"workflowSource": identity, "definitionDigest": digest}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
