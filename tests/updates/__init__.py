"""Tests of ``piw/updates``: update envelopes, publishing and shell output lines."""
