"""Open-loop flows (``workload.open_loop``): Poisson arrivals at a target load of the host links, sizes drawn from
a flow-size CDF, FCT slowdown by size bucket (docs/open-loop.md).

- :mod:`testbed.workloads.open_loop.cdf`: CDF files in HPCC's traffic_gen format, the shipped WebSearch and
  Facebook Hadoop distributions (cdfs/), drawing sizes;
- :mod:`testbed.workloads.open_loop.arrivals`: the flows: Poisson arrivals per host, destinations, lanes;
- :mod:`testbed.workloads.open_loop.standalone`: a flow's ideal FCT alone on an idle path (the slowdown's
  denominator);
- :mod:`testbed.workloads.open_loop.plan`: the plan before anything is built, the buckets' edges, the estimate;
- :mod:`testbed.workloads.open_loop.driver`: the run on the agents, fct.csv, slowdown.csv, summary.json's
  ``open_loop``;
- :mod:`testbed.workloads.open_loop.workload`: its Workload (testbed.workloads.base).
"""
