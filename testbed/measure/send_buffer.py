"""Open vSwitch's send socket on the userspace datapath: can it hold every emulated switch buffer?

On the userspace datapath ``ovs-vswitchd`` sends to every port of every
bridge through ONE AF_PACKET socket (:func:`ovs_send_socket`); every packet
waiting in any switch egress queue is charged to its send buffer, so that
buffer caps all emulated switch buffers together, and a send beyond it is
lost where nothing counts it. :func:`check_run_send_buffer` refuses a run
before anything is built when the socket is too small (:class:`RunRefused`);
:func:`judge_send_buffer` reads it again after the run for the verdict.
"""
from __future__ import annotations

from typing import Optional

from testbed.measure.drops import PacketSocket, ovs_socket_inodes, packet_sockets
from testbed.measure.fidelity_checks import FAILED, NOT_JUDGED, PASSED
from testbed.measure.verdict import FidelityVerdict

#: Bytes a queued full-size frame is charged to a socket's send buffer (skb truesize)
#: per frame byte: 212,992 B held about 90 frames of 1,082 B here (2.19 x), plus margin.
TRUESIZE_FACTOR = 2.5
#: Send buffer kept free beyond the emulated buffers (control packets, ARP, LLDP).
SEND_BUFFER_HEADROOM_BYTES = 1 << 20


def ovs_send_socket() -> Optional[PacketSocket]:
    """The AF_PACKET socket ovs-vswitchd sends every userspace-datapath packet through, or None.

    Open vSwitch (lib/netdev-linux.c, ``af_packet_sock``) creates one unbound,
    non-blocking AF_PACKET socket on its first send and keeps it for the life of
    the process; its send buffer is ``net.core.wmem_default`` at that moment.
    Found as the ovs-vswitchd packet socket bound to no interface (ifindex 0);
    None when OVS has not sent a packet yet. Raises RuntimeError when
    ovs-vswitchd is not running.
    """
    inodes = ovs_socket_inodes()
    unbound = [ps for inode, ps in packet_sockets().items() if inode in inodes and ps.ifindex == 0]
    return max(unbound, key=lambda ps: ps.sndbuf_bytes) if unbound else None


def required_send_buffer_bytes(n_switch_ports: int, buffer_bytes: int, in_flight_bytes: Optional[int] = None) -> int:
    """Send buffer that holds everything the emulated switch queues can hold at once, plus headroom:
    ``TRUESIZE_FACTOR * min(n_switch_ports * buffer_bytes, in_flight_bytes) + SEND_BUFFER_HEADROOM_BYTES``.

    ``in_flight_bytes`` (None: no bound) is the most the transport can have
    unacknowledged in the whole fabric (every QP's window of full frames): the
    queues never hold more than that, however deep they are configured."""
    queued = n_switch_ports * buffer_bytes
    if in_flight_bytes is not None:
        queued = min(queued, in_flight_bytes)
    return int(queued * TRUESIZE_FACTOR) + SEND_BUFFER_HEADROOM_BYTES


def _read_wmem_default() -> int:
    with open("/proc/sys/net/core/wmem_default") as f:
        return int(f.read())


def send_buffer_check(n_switch_ports: int, buffer_bytes: int, in_flight_bytes: Optional[int] = None) -> dict:
    """Can Open vSwitch's send socket hold all emulated switch buffers (userspace datapath)?

    ``in_flight_bytes``: see :func:`required_send_buffer_bytes`.

    Returns ``{"ok": bool, "sndbuf_bytes", "required_bytes", "source", "message"}``:
    ``source`` is ``"socket"`` (the live socket's SK_MEMINFO_SNDBUF) or
    ``"wmem_default"`` (no socket yet: it will be created with net.core.wmem_default).
    ``message`` names the limit and the fix when not ok. Raises RuntimeError
    when ovs-vswitchd is not running.
    """
    need = required_send_buffer_bytes(n_switch_ports, buffer_bytes, in_flight_bytes)
    sock = ovs_send_socket()
    have, source = (sock.sndbuf_bytes, "socket") if sock else (_read_wmem_default(), "wmem_default")
    fig = {"ok": have >= need, "sndbuf_bytes": have, "required_bytes": need, "source": source, "message": ""}
    if not fig["ok"]:
        where = ("Open vSwitch's send socket (userspace datapath) has a send buffer of"
                 if sock else "Open vSwitch has not sent yet and will create its send socket with net.core.wmem_default =")
        fig["message"] = (
            f"{where} {have} bytes, but the {n_switch_ports} emulated switch buffers of fabric.buffer_bytes = "
            f"{buffer_bytes} (holding at most {in_flight_bytes} bytes in flight) need {need} bytes "
            f"(x{TRUESIZE_FACTOR} per queued byte + "
            f"{SEND_BUFFER_HEADROOM_BYTES} headroom): OVS would drop packets that no counter sees before the "
            f"emulated queues fill. Fix: restart Open vSwitch with a larger send buffer when no other run is live "
            f"(sudo scripts/start-ovs --restart --wmem-bytes {max(need, 64 << 20)}), or lower fabric.buffer_bytes")
    return fig




class RunRefused(RuntimeError):
    """The machine cannot run this scenario faithfully; nothing was built (``testbed run`` exit code 4)."""


def check_run_send_buffer(spec, datapath: str) -> dict:
    """Refuse a userspace-datapath run whose queues Open vSwitch's send socket cannot hold.

    ``spec``: a :class:`testbed.spec.scenario.ScenarioSpec` (every switch port of its
    layout has an egress queue, ``fabric.n_switch_ports``; a host has at
    most 4 requester QPs in use, towards its 2 ring neighbours in each of up to 2
    concurrent group rings (TP and DP), one window each in flight). Returns the check's figures (manifest and verdict); raises
    :class:`RunRefused` naming the limit and the fix when too small.
    """
    if datapath != "user":
        return {"ok": True, "source": "kernel datapath: OVS sends through the kernel, no shared socket"}
    f, t = spec.fabric, spec.transport
    n_ports = f.n_switch_ports
    frame_bytes = 14 + 20 + 8 + 12 + t.payload_bytes + 4  # Ethernet, IPv4, UDP, BTH, payload, ICRC
    in_flight_bytes = f.n_hosts * 4 * t.window_pkts * frame_bytes
    fig = send_buffer_check(n_ports, f.buffer_bytes, in_flight_bytes)
    if not fig["ok"]:
        raise RunRefused(fig["message"])
    return fig


def judge_send_buffer(verdict: FidelityVerdict, send_buffer: dict) -> None:
    """Add the ``ovs_send_buffer`` check: Open vSwitch's send socket (read again now: it is created
    on OVS's first send) must hold ``send_buffer["required_bytes"]`` (see :func:`send_buffer_check`);
    not judged on the kernel datapath."""
    if send_buffer.get("sndbuf_bytes") is None:
        verdict.add("ovs_send_buffer", NOT_JUDGED, send_buffer.get("source", ""), send_buffer)
        return
    try:
        now = ovs_send_socket()
    except RuntimeError:
        now = None
    send_buffer = {**send_buffer, "sndbuf_bytes_after": now.sndbuf_bytes if now else None}
    if now is not None and now.sndbuf_bytes < send_buffer["required_bytes"]:
        verdict.add("ovs_send_buffer", FAILED,
                    f"Open vSwitch's send socket holds {now.sndbuf_bytes} bytes, less than the "
                    f"{send_buffer['required_bytes']} bytes the emulated switch buffers need: packets beyond it "
                    "are lost where nothing counts them", send_buffer)
    else:
        verdict.add("ovs_send_buffer", PASSED, "", send_buffer)
