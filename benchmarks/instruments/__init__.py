"""Instruments used only by the benchmarks and the integration tests: set-ups, host-side senders and
receivers and their figures, run against a real fabric. Not part of the installed product."""
