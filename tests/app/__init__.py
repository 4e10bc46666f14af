"""Tests of ``piw/app``: the full-screen viewer (``piw view``)."""
