"""The Chakra execution-trace replay (``workload.chakra``): :mod:`plan` (the traces read into the op plan and
the dependency graph), :mod:`run` (the graph on the agents) and :mod:`workload` (its Workload)."""
