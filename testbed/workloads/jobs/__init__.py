"""Several jobs on one fabric (the scenario's ``jobs`` list, testbed.spec.jobs): where they run
(testbed.spec.placement), their op plan (:mod:`plan`), the links their flows use and their fair shares
(:mod:`links`), their tables and slowdowns (:mod:`results`), the solo baselines (:mod:`solo`,
:mod:`solo_store`) and the Workload that runs them (:mod:`workload`). A SimAI job's and a pattern job's own
parts are in their kinds' packages (testbed.workloads.simai.job, testbed.workloads.pattern.job)."""
