"""Traffic patterns on the fabric (``workload.pattern``): plan, trial driver, ideal and results.

- :mod:`testbed.patterns.plan`: the pattern's flows on a layout, each rank's peers, the estimate;
- :mod:`testbed.patterns.driver`: runs the trials, fresh agents (a new entropy seed) per trial;
- :mod:`testbed.patterns.ideal`: the flows' completion times on an ideal fabric (fluid max-min);
- :mod:`testbed.patterns.results`: fct.csv, flow_rates.csv, uplinks.csv and summary.json's
  ``load_balance`` block.
"""
