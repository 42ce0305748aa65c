"""Honest under loss and at the edge (issue 16): drops counted once, fair tail drop, no silent "faithful".

Each case is a real ``testbed run``:

* two identical senders into one 32 KB tail-drop queue (2 hosts on leaf 1, the receiver on leaf 2,
  10 Mbit/s, no congestion control, go-back-N, 8 MiB each): every loss is a switch-queue tail drop
  counted once, the drops split between the senders, and their goodput while both send is fair.
  One seed here; ``benchmarks/fair_tail_drop.py`` runs seeds 1-10 against the issue's bands;
* the quickstart with 5 Mbit/s fabric links and 8 KB buffers (2 frames): heavy loss inside the
  emulated queues is the experiment, and the run is faithful when every loss is accounted for;
* a 4-host ring at 500 Mbit/s, far above what 2 cores emulate: the run is not called faithful and
  the verdict says why.
"""
from pathlib import Path

import pytest

from conftest import (EXIT_FAITHFUL, REPO, assert_faithful, assert_faithful_or_only_pacing_failed,
                      assert_losses_accounted, run_scenario_file)
from testbed.results.rundir import RunDir

TWO_SENDERS = """
name: fair-tail-drop
seed: {seed}
fabric: {{spines: 1, leaves: 2, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M, buffer_bytes: 32KB,
         mtu_bytes: 4200}}
transport: {{congestion_control: none, payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}}
workload:
  pattern: {{kind: flows, flows: [{{src: h1, dst: h3, size_bytes: 8MiB}}, {{src: h2, dst: h3, size_bytes: 8MiB}}]}}
"""


def loss_shares(run_dir: Path) -> dict[str, float]:
    """sender -> its share of the data packets lost (fct.csv ``lost_pkts``)."""
    fct = RunDir.open(run_dir).fct
    return (fct.groupby("src")["lost_pkts"].sum() / fct["lost_pkts"].sum()).to_dict()


#: one seed in the suite; the bands over seeds 1-10 are benchmarks/fair_tail_drop.py's (issue 30: a figure
#: that needs many runs is a benchmark, one run stays here)
@pytest.mark.parametrize("seed", [1])
def test_two_senders_split_tail_drops_evenly_and_every_drop_counts_once(tmp_path, seed):
    # the subject is the accounting: a run the busy machine paced badly (NOT faithful on packet timing only)
    # still has to count and split its drops exactly
    res, s = run_scenario_file(tmp_path, TWO_SENDERS.format(seed=seed), timeout=300, expect_rc=None,
                               name=f"fair{seed}")
    i = assert_losses_accounted(s)  # 0 losses outside the emulated queues, each drop counted once
    assert i["switch_queue_drops_pkts"] >= 200, i
    shares = loss_shares(s["run_dir"])
    lb = s["load_balance"]
    print(f"seed {seed}: drops {i['switch_queue_drops_pkts']}, shares {shares}, goodput Jain while both send "
          f"{lb['overlap_jain_mean']:.3f}, timeouts {s['transport']['timeouts']}")
    # issue 16: each sender's drop share within 35-65 % (before: 0.55-0.85 on one host in every seed)
    assert all(0.35 <= x <= 0.65 for x in shares.values()), shares
    # goodput while both send: Jain >= 0.95 over seeds 1-10 is the benchmark's band (measured 9 of 10, min
    # 0.916: go-back-N's timeouts make single runs vary); one run must at least not lock a sender out
    # (before: 0.62-0.77)
    assert lb["overlap_jain_mean"] >= 0.9, lb
    assert_faithful_or_only_pacing_failed(res, s)


def test_heavy_loss_inside_the_queues_is_the_experiment_and_faithful(tmp_path):
    # 64 and 128 KiB: about 2,700 tail drops and 5,300 packets resent (up to 256 KiB, 6,202 and 12,486 in 40 s
    # of traffic, 2026-12-08), at busbw/link about 0.1
    text = (REPO / "scenarios" / "quickstart.yaml").read_text().replace("fabric_link_bps: 10M", "fabric_link_bps: 5M") \
        .replace("buffer_bytes: 100KB", "buffer_bytes: 8KB").replace("max_bytes: 4MiB", "max_bytes: 128KiB")
    res, s = run_scenario_file(tmp_path, text, timeout=300, expect_rc=None, name="lossy")
    t = s["transport"]
    i = assert_losses_accounted(s)
    print(f"5M/8KB: {i['switch_queue_drops_pkts']} tail drops, {t['retx_pkts']} resent of {t['sent_pkts']}, "
          f"busbw/link {[round(x['busbw_ratio'], 3) for x in s['sizes']]}; {s['violations']}")
    assert i["switch_queue_drops_pkts"] > 1000 and t["retx_pkts"] > 1000  # heavy loss, all of it in the queues
    assert t["delivered_bytes"] == t["posted_bytes"] == t["acked_bytes"] and t["order_errors"] == 0
    for check in ("drops", "transport_loss", "hosts", "bytes"):  # loss in the queues fails none of them
        assert s["checks"][check]["status"] == "passed", (check, s["checks"][check])
    assert_faithful(s)  # a run the machine disturbed (pacing checks only) runs again
    assert res.returncode == EXIT_FAITHFUL


RING_500M = """
name: ring-500m
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 2, host_link_bps: 500M, fabric_link_bps: 500M, mtu_bytes: 4200,
         buffer_bytes: 200KB}
transport: {payload_bytes: 4096, window_pkts: 16, ack_every_pkts: 4}
workload: {collective: allreduce, algorithm: ring, sizes: {min_bytes: 4MiB, max_bytes: 4MiB}, iterations: 3,
           warmup_iterations: 1}
fidelity: {max_capacity_ratio: off}   # far above the machine on purpose: run it instead of refusing it
"""


def test_a_run_far_above_the_machine_is_not_called_faithful(tmp_path):
    # issue 16: busbw/link 0.12-0.17 and "FAITHFUL, exit 0" before, every rate check not judged
    res, s = run_scenario_file(tmp_path, RING_500M, timeout=300, expect_rc=None, name="r500")
    ratio = s["sizes"][0]["busbw_ratio"]
    print(f"500 Mbit/s ring: busbw/link {ratio:.3f}, exit {res.returncode}, verdict {s['verdict']}: "
          f"{s['violations']} {s['not_judged']}")
    assert ratio < 0.9
    assert res.returncode != EXIT_FAITHFUL and not s["faithful"]
    assert s["verdict"] in ("not_faithful", "not_judged")
    named = s["violations"] if s["verdict"] == "not_faithful" else s["not_judged"]
    assert named and all(isinstance(v, str) and len(v) > 20 for v in named)
    printed = res.stdout
    assert "# fidelity: NOT" in printed
