"""skb marks the run's own frames carry, so its netdev egress rules can tell passes and senders apart.

The switch ports' silent tail drop (testbed.emulation.switch_tail_drop) hands
every frame back to its port once, marked :data:`SECOND_PASS_MARK`; a frame
that already carries the mark goes straight on to the qdisc. The PFC frame
sender (:mod:`dataplane.pfc_frames`) sets the mark on its socket, so its
frames skip the rule's detour.
"""
from __future__ import annotations

#: skb mark of a frame's second pass ("tb" in ASCII, as the controller's flow cookie)
SECOND_PASS_MARK = 0x7462
