"""Effect classes of ``action`` and ``shell`` nodes: what piw may do with an attempt a crash interrupted.

``retry`` (the default, and what the older label ``"idempotent"`` means): an interrupted attempt runs again.
``once``: an interrupted attempt is never rerun blindly; the run parks with status ``unknown`` (outcome unknown)
until a person answers ``piw resolve``. ``reconcile``: on resume piw asks the node's ``check(ctx)`` once whether the
effect happened. Every action gets ``ctx.idempotency_key``, stable across the attempts of one visit, to hand to
APIs that deduplicate (``docs/effects.md``).
"""

from __future__ import annotations

import hashlib
from typing import Literal

from piw.errors import DefinitionError

EffectClass = Literal["retry", "once", "reconcile"]
EFFECT_CLASSES: tuple[EffectClass, ...] = ("retry", "once", "reconcile")
RETRY_LABELS = frozenset({"retry", "idempotent"})
"""Labels that mean ``retry``: the class itself and the label piw accepted before effect classes existed."""


def effect_class(label: str | None) -> EffectClass:
    """The class a node's ``effect`` label names (no label, or ``"idempotent"``: ``retry``)."""
    if label == "once":
        return "once"
    if label == "reconcile":
        return "reconcile"
    return "retry"


def check_effect(effect: object, check: object) -> None:
    """``DefinitionError`` unless ``effect`` is a class (or ``"idempotent"``) and ``check`` fits it."""
    if effect is not None and (not isinstance(effect, str) or effect not in {*EFFECT_CLASSES, *RETRY_LABELS}):
        raise DefinitionError(
            f"effect must be one of 'retry', 'once', 'reconcile' (or 'idempotent', meaning 'retry'), got {effect!r}"
        )
    if effect == "reconcile" and not callable(check):
        raise DefinitionError(
            "effect='reconcile' needs check=fn, a function of the context returning the output or None"
        )
    if check is not None and effect != "reconcile":
        raise DefinitionError("check= is only for effect='reconcile'")


def idempotency_key(run_id: str, node_id: str, visit: int) -> str:
    """The key of one visit of a node: every attempt of that visit (a rerun after a crash, a ``resolve retry``)
    gets the same one; the next visit of a loop gets another."""
    digest = hashlib.sha256(f"{run_id}/{node_id}/{visit}".encode()).hexdigest()
    return f"piw-{digest[:32]}"
