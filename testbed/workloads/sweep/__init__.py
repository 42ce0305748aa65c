"""The size sweep (``workload.sizes``): :mod:`workload` (its Workload: nccl-tests' iterations per size) and
:mod:`nccl` (``testbed nccl``: nccl-tests' command line onto a sweep scenario); its op plan is
testbed.workloads.plan.sweep_plan."""
