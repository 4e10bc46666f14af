"""Tests of ``piw/cli``: the commands, their options, the live frame and ``piw watch``."""
