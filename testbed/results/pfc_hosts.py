"""summary.json's ``pfc_hosts`` block: the PFC frames the hosts' NICs received and obeyed.

From each agent's :class:`traffic.protocol.PfcRxStats` (traffic.transport.pfc_rx); every frame is
in ``pfc_rx.csv`` (rank, time_ns, class_enable_vector, lossless_quanta) and each requester QP's
held time in ``qps.csv`` (``pfc_paused_ns``).
"""
from __future__ import annotations


def pfc_hosts_block(stats: list, host_names: list[str]) -> dict | None:
    """Totals and per-host figures, or None when no host received a PFC frame.

    ``stats``: each agent's Stats; ``host_names[rank]``: the host of each rank. Keys:
    ``pause_frames_rx``, ``resume_frames_rx``, ``paused_time_s`` (sum over hosts of the time the
    lossless class was paused) and ``hosts``: host -> {pause_frames_rx, resume_frames_rx, paused_time_s}.
    """
    hosts = {host_names[s.rank]: {"pause_frames_rx": s.pfc.pause_frames, "resume_frames_rx": s.pfc.resume_frames,
                                  "paused_time_s": s.pfc.paused_ns / 1e9}
             for s in stats if s.pfc.frames}
    if not hosts:
        return None
    return {"pause_frames_rx": sum(h["pause_frames_rx"] for h in hosts.values()),
            "resume_frames_rx": sum(h["resume_frames_rx"] for h in hosts.values()),
            "paused_time_s": sum(h["paused_time_s"] for h in hosts.values()), "hosts": hosts}
