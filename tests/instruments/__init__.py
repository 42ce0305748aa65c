"""Instruments used only by the integration tests: host-side senders and receivers run against a real
fabric. Not part of the installed product."""
