"""The durable mark an effect leaves before it starts: ``effect_started`` (``docs/effects.md``).

A ``once`` or ``reconcile`` action writes it, made durable, just before its effect begins; a resume that finds it
without the attempt's terminal event knows the effect may have happened, and so never reruns it blindly. A
``retry`` action writes nothing extra: rerunning it is what its author asked for.
"""

from __future__ import annotations

from typing import Any

from piw.run.executors import Attempt
from piw.workflow.context import ActionContext
from piw.workflow.definition import ActionNode


def mark_effect_start(attempt: Attempt, receipt: dict[str, Any], *, sync: bool = True) -> None:
    """Append ``effect_started`` for a ``once``/``reconcile`` action (nothing for ``retry``); ``sync=False`` when
    a durable line follows before the effect starts (the shell's ``process_started``)."""
    node = attempt.gnode.node
    if not isinstance(node, ActionNode) or node.effect_class == "retry":
        return
    ctx = attempt.ctx
    payload: dict[str, Any] = {"effect": node.effect_class, **receipt}
    if isinstance(ctx, ActionContext) and ctx.idempotency_key:
        payload["idempotencyKey"] = ctx.idempotency_key
    attempt.writer.append(
        "action", "effect_started", payload, node_id=attempt.node_id, attempt_id=attempt.attempt_id, sync=sync
    )
