"""The :class:`~piw.planning.project.Setting` of a workflow about to run here: its validated input, the earlier
runs in this home, the selected provider's price and the agent's turn limit (``docs/planning.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from piw.config.prices import LOCAL_APIS
from piw.errors import NeedsKey, ProviderError
from piw.planning.history import read_history
from piw.planning.project import Price, Setting
from piw.workflow.loader import LoadedWorkflow, prepare_input


def plan_setting(
    loaded: LoadedWorkflow,
    home: Path,
    raw_input: Any,
    provider: str | None = None,
    model: str | None = None,
    script: str | None = None,
) -> Setting:
    """Everything ``project`` needs; a bad input or provider is the same error a run would give."""
    from piw.config.settings import load_config
    from piw.providers.selection import select_provider

    config = load_config(home)
    input_value = prepare_input(loaded.definition, raw_input)
    if script is not None and provider is None:
        provider = "scripted"
    try:
        selection = select_provider(config, provider, model)
    except NeedsKey:
        raise
    except ProviderError:
        if provider is not None or model is not None:
            raise  # a named provider or model that does not exist is the error a run would give
        selection = None  # none selected: a plan still counts requests and tokens, without a price
    if selection is None:
        return Setting(
            input_value, read_history(home, loaded.definition.name), None, max_turns=config.agent.max_turns
        )
    cost = selection.model_settings.cost if selection.model_settings else None
    price: Price | None
    if cost is not None:
        price = Price(cost.input, cost.output, cost.cache_read)
    elif selection.settings.api in LOCAL_APIS:
        price = Price(0.0, 0.0, 0.0, local=True)
    else:
        price = None
    return Setting(
        input=input_value,
        history=read_history(home, loaded.definition.name),
        price=price,
        provider=selection.provider,
        model=selection.model,
        max_turns=config.agent.max_turns,
    )
