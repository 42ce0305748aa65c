"""Cost of sampling qdisc counters: pyroute2 parsing vs dataplane.qdisc_sampler's decoder.

Builds 24 veth pairs ``tbbe01v<N>a``/``tbbe01v<N>b`` in the root namespace, shapes
the ``a`` ends with :func:`testbed.emulation.htb_bfifo.shape_egress` (HTB + bfifo, as on
switch ports), then prints

* per-dump CPU time of one RTM_GETQDISC dump decoded by
  (1) ``IPRoute().get_qdiscs()`` (full pyroute2 parsing),
  (2) a raw socket + pyroute2 ``Marshal`` with a lean tcmsg class mapping only
      TCA_KIND and TCA_STATS2/{BASIC,QUEUE}, skipping unwatched messages first,
  (3) ``dataplane.qdisc_sampler.QdiscDumper`` (struct decoder);
* the CPU % of one core used by the :class:`~dataplane.qdisc_sampler.QdiscSampler`
  thread at 1 ms and 10 ms periods, with achieved sample counts.

Every interface it creates is deleted in ``finally``. Needs root.
Usage: ``python benchmarks/telemetry_cost.py [--ports 24] [--seconds 5]``
"""
from __future__ import annotations

import argparse
import socket
import struct
import time

from pyroute2 import IPRoute
from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST, nla, nlmsg

from dataplane.queues import htb_bfifo
from dataplane import qdisc_sampler
from testbed.host.runlock import RunLock

PREFIX = "tbbe01"


class _LeanTcmsg(nlmsg):
    """tcmsg with only the NLAs the sampler needs (pyroute2 decoding)."""

    fields = (("family", "B"), ("pad1", "B"), ("pad2", "H"), ("index", "i"),
              ("handle", "I"), ("parent", "I"), ("info", "I"))
    nla_map = (("TCA_UNSPEC", "none"), ("TCA_KIND", "asciiz"), ("TCA_OPTIONS", "none"),
               ("TCA_STATS", "none"), ("TCA_XSTATS", "none"), ("TCA_RATE", "none"),
               ("TCA_FCNT", "none"), ("TCA_STATS2", "stats2"))

    class stats2(nla):
        nla_map = (("TCA_STATS_UNSPEC", "none"), ("TCA_STATS_BASIC", "basic"),
                   ("TCA_STATS_RATE_EST", "none"), ("TCA_STATS_QUEUE", "queue"))

        class basic(nla):
            fields = (("bytes", "Q"), ("packets", "I"))

        class queue(nla):
            fields = (("qlen", "I"), ("backlog", "I"), ("drops", "I"),
                      ("requeues", "I"), ("overlimits", "I"))


def _lean_pyroute2_dump(sock: socket.socket, want: set[int], buf: bytearray) -> list:
    sock.send(struct.pack("=IHHII", 36, qdisc_sampler.RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
              + struct.pack("=BBHiIII", 0, 0, 0, 0, 0, 0, 0))
    out = []
    while True:
        n = sock.recv_into(buf)
        data = bytes(buf[:n])
        off = 0
        while off < n:
            length, mtype = struct.unpack_from("=IH", data, off)
            if mtype == qdisc_sampler.NLMSG_DONE:
                return out
            if mtype == qdisc_sampler.RTM_NEWQDISC:
                ifindex, _h, parent = struct.unpack_from("=iII", data, off + 20)
                if parent == qdisc_sampler.TC_H_ROOT and ifindex in want:
                    msg = _LeanTcmsg(data, offset=off)
                    msg.decode()
                    st = msg.get_attr("TCA_STATS2")
                    b, q = st.get_attr("TCA_STATS_BASIC"), st.get_attr("TCA_STATS_QUEUE")
                    out.append((ifindex, b["bytes"], b["packets"], q["drops"], q["backlog"], q["qlen"]))
            off += (length + 3) & ~3


def _cpu_per_call_ms(fn, seconds: float = 1.0) -> float:
    for _ in range(5):
        fn()
    n, c0 = 0, time.process_time()
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        fn()
        n += 1
    return (time.process_time() - c0) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=5.0, help="sampler run per period")
    args = ap.parse_args()
    names = [f"{PREFIX}v{i}a" for i in range(args.ports)]
    with RunLock(PREFIX) as lock:  # a live run's objects are never swept by `testbed clean`
        _bench(args, names, lock)


def _bench(args, names: list[str], lock: RunLock) -> None:
    ipr = IPRoute()
    created: list[str] = []
    try:
        for i, name in enumerate(names):
            lock.record("interface", name)
            ipr.link("add", ifname=name, kind="veth", peer=f"{PREFIX}v{i}b")
            created.append(name)
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
            htb_bfifo.shape_egress(ipr, name, 10e6, 30000)
        indexes = [socket.if_nametoindex(n) for n in names]
        nqdiscs = len(list(ipr.get_qdiscs()))
        print(f"{args.ports} shaped ports, {nqdiscs} qdiscs in the root-namespace dump")

        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        sock.bind((0, 0))
        buf = bytearray(1 << 16)
        dumper = qdisc_sampler.QdiscDumper(indexes)
        row = [-1] * (5 * len(indexes))
        want = set(indexes)
        results = [
            ("pyroute2 IPRoute.get_qdiscs() full parsing", lambda: list(ipr.get_qdiscs())),
            ("pyroute2 lean tcmsg class, pre-filtered", lambda: _lean_pyroute2_dump(sock, want, buf)),
            ("dataplane.qdisc_sampler.QdiscDumper (struct)", lambda: dumper.dump_into(row)),
        ]
        for label, fn in results:
            print(f"  {label:48s} {_cpu_per_call_ms(fn):7.3f} ms CPU per dump")
        dumper.close()
        sock.close()

        for period_s in (0.001, 0.01):
            with qdisc_sampler.QdiscSampler(names, period_s) as s:
                time.sleep(args.seconds)
            expected = s.wall_s / period_s
            print(f"  sampler period {period_s * 1e3:4.0f} ms: thread CPU {s.cpu_pct:5.1f}% of one core, "
                  f"{s.samples} samples of {expected:.0f} ticks, missed {s.missed_ticks}")
    finally:
        for name in created:
            try:
                ipr.link("del", ifname=name)
            except Exception as e:  # keep deleting the others
                print(f"cleanup {name}: {e}")
        ipr.close()


if __name__ == "__main__":
    main()
