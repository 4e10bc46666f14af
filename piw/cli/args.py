"""``piw inspect -1``: a run reference such as ``-1`` or ``-2`` is an argument, not an unknown option.

Click reads every token that starts with ``-`` as an option, so ``piw inspect -1`` failed with ``No such option:
-1``. Before parsing, :func:`protect_run_refs` finds the command's ``-N`` tokens that are not the value of an option
and moves every positional token behind a ``--`` (in order, after the options), which is how click is told that
what follows are arguments. The command line means the same thing; only its spelling for click changes. An
option's value (``--limit -1``) is left where it is, so that option still reports its own error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_REF = re.compile(r"-[1-9][0-9]{0,5}")


def is_run_ref(token: str) -> bool:
    """``-1``, ``-2``, …: the n-th newest run."""
    return _REF.fullmatch(token) is not None


def _takes_value(command: Any, token: str) -> bool:
    """Whether ``token`` (an option without ``=value``) consumes the next token as its value."""
    for param in command.params:
        if param.param_type_name == "option" and token in (*param.opts, *param.secondary_opts):
            return not param.is_flag and not param.count
    return False


def protect_run_refs(group: Any, argv: Sequence[str]) -> list[str]:
    """``argv`` with the positional arguments of its command after ``--`` when one of them is ``-N``."""
    args = list(argv)
    if not any(_REF.fullmatch(arg) for arg in args):
        return args
    start = next((i for i, arg in enumerate(args) if not arg.startswith("-")), None)
    if start is None:
        return args
    command = getattr(group, "commands", {}).get(args[start])
    if command is None or hasattr(command, "commands"):
        return args
    options: list[str] = []
    positional: list[str] = []
    rest = args[start + 1 :]
    index = 0
    while index < len(rest):
        token = rest[index]
        if token == "--":
            positional.extend(rest[index + 1 :])
            break
        if token.startswith("-") and len(token) > 1 and not _REF.fullmatch(token):
            options.append(token)
            if "=" not in token and _takes_value(command, token) and index + 1 < len(rest):
                options.append(rest[index + 1])
                index += 1
        else:
            positional.append(token)
        index += 1
    if not any(_REF.fullmatch(token) for token in positional):
        return args
    return [*args[: start + 1], *options, "--", *positional]
