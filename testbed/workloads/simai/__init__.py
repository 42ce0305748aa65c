"""The SimAI/AICB replay (``workload.simai``): :mod:`plan` (the file read into the op plan and the timeline),
:mod:`programs` (each rank's program of compute waits and communicator ops), :mod:`workload` (its Workload,
run by testbed.workloads.replay.run) and :mod:`job` (the file as one job of a ``jobs`` list)."""
