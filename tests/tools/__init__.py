"""Tests of ``piw/tools``: the agent tools and their registry."""
