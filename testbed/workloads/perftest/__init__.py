"""perftest runs over Soft-RoCE devices (``workload.perftest``): :mod:`workload` (its Workload; the runs
themselves: testbed.emulation.perftest)."""
