"""Regression suites: scenarios run and judged against stored baselines (``testbed regress``)."""
