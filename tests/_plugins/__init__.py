"""Test helpers that stand in for third-party code a space or an installed package plugs in."""
