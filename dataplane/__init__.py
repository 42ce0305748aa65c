"""What both processes of a run drive in the kernel: the testbed runner and the controller process.

Packages stack ``topology``, ``traffic`` -> ``dataplane`` -> ``controllers`` ->
``testbed``: modules here import only the two packages below (and the standard
library, numpy, pandas, pyroute2), never ``controllers`` or ``testbed``
(.importlinter, tests/test_import_layers.py).

- :mod:`dataplane.queues`: queue backends, the egress qdiscs (tc over netlink) of every switch port and host NIC;
- :mod:`dataplane.qdisc_sampler`: the 1 ms ``RTM_GETQDISC`` sampler of those queues;
- :mod:`dataplane.ecn_policy`: the RED marking curve and the per-port marking decision (pure);
- :mod:`dataplane.ecn_marker`: the nftables egress rules that mark CE with that probability;
- :mod:`dataplane.pfc_gate`: pause and resume of a traffic class's tbf leaf (raw netlink) plus the kick frame;
- :mod:`dataplane.rtnetlink`: prebuilt tc change requests on a raw NETLINK_ROUTE socket (PFC gate, clock wander);
- :mod:`dataplane.pfc_frames`: IEEE 802.1Qbb PFC frames sent from a switch port;
- :mod:`dataplane.pfc_watchdog_drop`: the PFC watchdog's drop rules for a port in storm;
- :mod:`dataplane.nft`: running nftables batches, reading named counters, a run's leftover tables;
- :mod:`dataplane.skb_marks`: the skb mark the run's own frames carry past its egress rules;
- :mod:`dataplane.atomic_files`: atomic text, JSON and CSV writers.
"""
