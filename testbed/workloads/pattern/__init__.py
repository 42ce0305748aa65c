"""Traffic patterns on the fabric (``workload.pattern``): plan, trial driver, ideal, results, the pattern as a job
and its Workload.

- :mod:`testbed.workloads.pattern.plan`: the pattern's flows on a layout, each rank's peers, the estimate;
- :mod:`testbed.workloads.pattern.driver`: runs the trials, fresh agents (a new entropy seed) per trial;
- :mod:`testbed.workloads.pattern.ideal`: the flows' completion times on an ideal fabric (fluid max-min);
- :mod:`testbed.workloads.pattern.results`: fct.csv, flow_rates.csv, uplinks.csv and summary.json's
  ``load_balance`` block;
- :mod:`testbed.workloads.pattern.job`: a pattern as one job of a ``jobs`` list;
- :mod:`testbed.workloads.pattern.workload`: its Workload (testbed.workloads.base).
"""
