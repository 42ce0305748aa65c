"""Share of flows each uplink of a leaf carries, measured with real packets (load-balancing checks).

One datagram per UDP source port goes from the first host to the second
(:mod:`benchmarks.instruments.entropy_sweep`); each source port is one flow to the select
group's hash, so the packets counted on each uplink of the first host's leaf
(``/sys/class/net/<if>/statistics/tx_packets``) are its share of flows.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

#: the repository root: host-side runs (``python -m benchmarks.instruments.entropy_sweep``) start there
ROOT = Path(__file__).resolve().parents[2]


def tx_pkts(ifname: str) -> int:
    """Packets sent on ``ifname`` so far (kernel counter)."""
    return int(Path(f"/sys/class/net/{ifname}/statistics/tx_packets").read_text())


def uplinks(layout) -> dict[str, str]:
    """Next-hop switch name without the run id (``s1``) -> the first host's leaf's interface towards it."""
    leaf = layout.attachment(layout.hosts[0].name).node
    rid = layout.run_id
    return {ln.peer(leaf).node[len(rid):]: (ln.a if ln.a.node == leaf else ln.b).intf
            for ln in layout.links_of(leaf) if ln.peer(leaf).node not in {h.name for h in layout.hosts}}


def uplink_flow_shares(fab, flows: int, first_sport: int = 49152) -> dict[str, float]:
    """Send ``flows`` one-datagram flows from host 0 to host 1 of a started Fabric; return each uplink's share.

    Raises AssertionError when the sweep did not send every datagram or the uplinks did not carry each
    exactly once (give or take 20 packets of other traffic).
    """
    ha, hb = fab.layout.hosts[0], fab.layout.hosts[1]
    up = uplinks(fab.layout)
    before = {s: tx_pkts(i) for s, i in up.items()}
    out = fab.host(0).cmd(f"cd {ROOT} && {sys.executable} -m benchmarks.instruments.entropy_sweep "
                          f"--run-id {fab.run_id} --ip {ha.ip} --peer {hb.ip} "
                          f"--sports {first_sport}-{first_sport + flows - 1}")
    assert json.loads(out.strip().splitlines()[-1]) == {"sent_pkts": flows}, out
    moved = {s: tx_pkts(i) - before[s] for s, i in up.items()}
    assert flows <= sum(moved.values()) <= flows + 20, moved
    return {s: m / sum(moved.values()) for s, m in moved.items()}


def raw_weight_group(layout, weights: dict[str, int], group_id: int = 1) -> str:
    """``ovs-ofctl -O OpenFlow15 mod-group`` text of the first host's leaf's uplink group with one bucket per
    uplink carrying its weight as the OVS bucket weight (what the ``weighted`` policy does not do)."""
    buckets = ",".join(f"bucket=bucket_id:{k},weight:{weights.get(s, 1)},actions=output:{intf.rsplit('eth', 1)[1]}"
                       for k, (s, intf) in enumerate(sorted(uplinks(layout).items())))
    return (f"group_id={group_id},type=select,selection_method=hash,"
            f"fields(ip_src,ip_dst,nw_proto,tcp_src,tcp_dst,udp_src,udp_dst),{buckets}")
