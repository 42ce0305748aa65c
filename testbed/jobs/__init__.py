"""Several jobs on one fabric (the scenario's ``jobs`` list, testbed.spec.jobs): where they run
(:mod:`placement`), their op plan (:mod:`plan`), the links their flows use and their fair shares
(:mod:`links`), their tables and slowdowns (:mod:`results`) and the solo baselines (:mod:`solo`)."""
