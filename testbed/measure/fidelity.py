"""Fidelity monitor: is this run's emulation honest? (Handigol et al., CoNEXT 2012)

One door to three small rooms:

* :mod:`testbed.measure.cpu`: :class:`CpuIdleMonitor`, idle % per core and machine, once a second.
* :mod:`testbed.measure.drops`: :class:`DropSnapshot` (every counter of packets lost
  outside the emulated switch queues, and the queues' own drops), :func:`delta`,
  and Open vSwitch's send socket check (:func:`send_buffer_check`).
* :mod:`testbed.measure.verdict`: :func:`evaluate` turns them into a
  :class:`FidelityVerdict` whose checks each pass, fail or are not judged.
"""
from testbed.measure.cpu import CpuIdleMonitor, core_column  # noqa: F401
from testbed.measure.drops import (  # noqa: F401
    OVS_DROP_COVERAGE_RE, OVS_SEND_ERROR_RE, DropSnapshot, PacketSocket, RunRefused, check_run_send_buffer, _read_net_dev, _read_snmp,
    _read_softnet_dropped, count_ovs_send_errors, delta, ovs_send_socket, queue_drops_delta,
    required_send_buffer_bytes, send_buffer_check,
)
from testbed.measure.verdict import (  # noqa: F401
    CHECKS, FAILED, NOT_JUDGED, PASSED, FidelityThresholds, FidelityVerdict, evaluate, fabric_congested_fraction,
    judge_send_buffer, spurious_retx_pkts, transport_totals,
)
