"""Parallel links and hash polarization on a real fabric (issue 18, item 7).

Fabric: 2 spines, 2 leaves of 1 host, two links between every leaf and every spine (P02's shape).
Host 1 sends 2000 one-datagram flows (one UDP source port each) to host 2. The leaf has four
equal-cost uplinks, numbered link by link (s1, s2, s1, s2); each spine has two links down to leaf 2.
Select groups use ``dp_hash``: the datapath's 5-tuple hash picks ``hash mod n`` of equal buckets, as a
switch ASIC indexes its ECMP members.

- ``hash_basis: same`` (one seed everywhere): spine 1 only sees flows with ``hash mod 4`` in {0, 2},
  so ``hash mod 2`` is always 0 there: one of its two links to leaf 2 stays idle (and the other one on
  spine 2). That is hash polarization.
- ``hash_basis: per_switch`` (every switch its own seed): each of the four spine-to-leaf links carries
  about a quarter of the flows.

The leaf's four uplinks carry a quarter each either way (2000 flows: one binomial standard deviation
of a 25 % share is 1 point; the bands are 7 points wide on each side).

The second test runs the user's scenario (scenarios/parallel_links_polarization.yaml: an alltoall of 8
hosts on the same shape, shortened to 2 trials of 128 KiB) with each basis and reads what the run wrote:
parallel_links.csv and the summary's ``load_balance`` block.
"""
import json
import sys

import pandas as pd

from benchmarks.instruments.flow_shares import ROOT, tx_pkts
from conftest import REPO, assert_losses_accounted, run_scenario_file

FLOWS = 2000


def _sweep_packets(fab, flows: int) -> dict[str, int]:
    """Send ``flows`` one-datagram flows host 1 -> host 2; packets each switch-switch port sent meanwhile."""
    layout = fab.layout
    hosts = {h.name for h in layout.hosts}
    ports = [end.intf for ln in layout.links if ln.a.node not in hosts and ln.b.node not in hosts
             for end in (ln.a, ln.b)]
    before = {p: tx_pkts(p) for p in ports}
    ha, hb = layout.hosts[0], layout.hosts[1]
    out = fab.host(0).cmd(f"cd {ROOT} && {sys.executable} -m benchmarks.instruments.entropy_sweep "
                          f"--run-id {fab.run_id} --ip {ha.ip} --peer {hb.ip} --sports 49152-{49152 + flows - 1}")
    assert json.loads(out.strip().splitlines()[-1]) == {"sent_pkts": flows}, out
    return {p[len(fab.run_id):]: tx_pkts(p) - before[p] for p in ports}


def _shares(moved: dict[str, int], names: list[str]) -> dict[str, float]:
    total = sum(moved[n] for n in names)
    assert total >= FLOWS, moved  # every datagram crossed these ports
    return {n: round(moved[n] / total, 3) for n in names}


LEAF_UPLINKS = ["l1-eth2", "l1-eth3", "l1-eth4", "l1-eth5"]
SPINE_DOWNLINKS = ["s1-eth2", "s1-eth4", "s2-eth2", "s2-eth4"]  # link 1 and link 2 of each spine to leaf 2


def test_same_hash_basis_polarizes_parallel_links_and_per_switch_basis_spreads(make_fabric):
    shares = {}
    for basis in ("same", "per_switch"):
        fab = make_fabric(spines=2, leaves=2, hosts_per_leaf=1, links_per_spine=2, host_link_bps=20e6,
                          fabric_link_bps=20e6,
                          load_balance={"policy": "ecmp", "hash_basis": basis, "selection_method": "dp_hash"})
        moved = _sweep_packets(fab, FLOWS)
        shares[basis] = (_shares(moved, LEAF_UPLINKS), _shares(moved, SPINE_DOWNLINKS))
        print(f"hash_basis {basis}: leaf l1 uplinks {shares[basis][0]}; spine links to l2 {shares[basis][1]}")
        fab.stop()

    for basis in ("same", "per_switch"):
        assert all(0.18 <= s <= 0.32 for s in shares[basis][0].values()), shares[basis]  # the leaf spreads
    same, per_switch = shares["same"][1], shares["per_switch"][1]
    # polarized: each spine sends everything on one of its two links to leaf 2 (which one: hash mod 2)
    for spine in ("s1", "s2"):
        pair = sorted(v for k, v in same.items() if k.startswith(spine))
        assert pair[0] <= 0.01 and 0.40 <= pair[1] <= 0.60, same
    assert all(0.18 <= s <= 0.32 for s in per_switch.values()), per_switch


def test_polarization_scenario_reports_an_idle_member_per_spine_bundle_and_per_switch_basis_uses_both(tmp_path):
    text = (REPO / "scenarios" / "parallel_links_polarization.yaml").read_text()
    assert "hash_basis: same" in text and "size_bytes: 256KiB, trials: 3" in text
    text = text.replace("size_bytes: 256KiB, trials: 3", "size_bytes: 128KiB, trials: 2")
    got = {}
    for basis in ("same", "per_switch"):
        _, summary = run_scenario_file(tmp_path, text.replace("hash_basis: same", f"hash_basis: {basis}"),
                                       expect_rc=None, name=basis)
        assert_losses_accounted(summary)
        table = pd.read_csv(next((tmp_path / basis).glob("*/parallel_links.csv")))
        spines = table[table["switch"].str.startswith("s")]
        shares = spines.groupby(["switch", "peer", "port"])["tx_bytes"].sum()  # over the trials
        shares = (shares / shares.groupby(level=["switch", "peer"]).transform("sum")).round(3)
        got[basis] = (shares, summary["load_balance"])
        lb_block = summary["load_balance"]
        print(f"hash_basis {basis}: spine member shares {shares.to_dict()}; parallel balance index "
              f"{lb_block['parallel_balance_index']:.3f}, smallest member share {lb_block['parallel_min_share']:.3f}, "
              f"completion ideal/measured {lb_block['completion_ratio_mean']:.3f}")
    same, same_lb = got["same"]
    per, per_lb = got["per_switch"]
    for (switch, peer), pair in same.groupby(level=["switch", "peer"]):
        assert sorted(pair)[0] <= 0.01 and sorted(pair)[1] >= 0.99, same  # one member idle in every spine bundle
    assert (per >= 0.2).all(), per  # per-switch seeds: both members carry a share
    assert same_lb["parallel_min_share"] <= 0.01 and per_lb["parallel_min_share"] >= 0.05
    assert same_lb["parallel_balance_index"] <= 0.8 < 0.85 <= per_lb["parallel_balance_index"]
    # half of each spine's capacity into a leaf idles: the alltoall takes longer than with both members
    assert per_lb["completion_ratio_mean"] >= 0.9 and same_lb["completion_ratio_mean"] < 0.9 * per_lb[
        "completion_ratio_mean"]
