"""Durable updates: the envelope and its limits, publishing from attempts, shell line framing."""
