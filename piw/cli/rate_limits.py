"""The rate-limit part of ``piw providers``: each provider's shared limit and its bucket now (``docs/rate-limits.md``).

The state is read from the run database (``piw.sqlite``, or PostgreSQL in database mode) without changing it; a
provider without ``rate_limit`` shows nothing, and its ``--json`` row has ``rateLimit: null``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from piw.errors import PiwError
from piw.terminal import safe_text

if TYPE_CHECKING:
    from piw.config.settings import PiwConfig


def rate_limit_json(home: Path, config: PiwConfig, name: str) -> dict[str, Any] | None:
    """``{requestsPerMinute, tokensPerMinute, concurrency, state}`` of provider ``name`` (``None``: no limit)."""
    settings = config.providers.get(name)
    limit = settings.rate_limit if settings is not None else None
    if limit is None:
        return None
    from piw.providers.rate_limited import open_rate_limits

    try:
        state: dict[str, Any] | None = open_rate_limits(home).snapshot(name, limit)
    except PiwError:
        state = None  # the database cannot be read: the limits are still worth showing
    return {
        "requestsPerMinute": limit.requests_per_minute,
        "tokensPerMinute": limit.tokens_per_minute,
        "concurrency": limit.concurrency,
        "state": state,
    }


def print_rate_limits(console: Console, home: Path, config: PiwConfig) -> None:
    """One line per limited provider: its limits, then what is left, in flight and any pause."""
    for name in config.providers:
        found = rate_limit_json(home, config, name)
        if found is None:
            continue
        limits = [
            f"{found['requestsPerMinute']} requests/min" if found["requestsPerMinute"] else "",
            f"{found['tokensPerMinute']:,} tokens/min" if found["tokensPerMinute"] else "",
            f"{found['concurrency']} at once" if found["concurrency"] else "",
        ]
        line = f"rate limit {name}: " + ", ".join(part for part in limits if part)
        state = found["state"]
        if state is not None:
            now = [f"{state['inFlight']} in flight"]
            if state["requestsLeft"] is not None:
                now.append(f"{state['requestsLeft']} requests left")
            if state["tokensLeft"] is not None:
                now.append(f"{state['tokensLeft']:,} tokens left")
            if state["pausedForMs"]:
                now.append(f"paused {state['pausedForMs'] / 1000:.1f}s more ({state['pauseReason']})")
            line += " · now " + ", ".join(now)
        console.print(safe_text(line), soft_wrap=True)
