"""A workload kind added through the registry alone (issue 30, item 2): a toy kind that sends one point-to-point
message from rank 0 to rank 1 runs on a real 2-host fabric at 10 Mbit/s, and the run's results hold its figures.

The toy is a :class:`testbed.workloads.base.Workload` subclass defined here, put into
``testbed.workloads.WORKLOADS`` (the one registry) and nowhere else: the runner, the estimate, the agents'
queue pairs, the verdict, the results and the printed lines all ask the workload, never which kind runs. Its
own figures go to toy_p2p.json in the run directory; summary.json's common blocks (sizes, transport) hold the
message like any collective's.
It uses the existing agent protocol: one ``send``/``chain`` operation (traffic.collectives.p2p.ChainSend) of
:data:`SIZE_BYTES` in the group (0, 1).
"""
import json

import testbed.workloads as workloads
from rerun_policy import assert_faithful
from testbed.pipeline.runner import run
from testbed.results.rundir import RunDir
from testbed.spec.scenario import parse_scenario
from testbed.workloads.collectives import Collectives
from testbed.workloads.plan import PlannedOp, WorkloadPlan

#: the one message, bytes (0.21 s at 10 Mbit/s)
SIZE_BYTES = 256 * 1024
LINK_BPS = 10e6


class OneMessage(Collectives):
    """``toy_p2p``: one message of SIZE_BYTES from rank 0 to rank 1; summary.json's ``toy_p2p`` block."""

    section = "toy_p2p"

    def __init__(self, spec):
        super().__init__(spec)
        self.block = None

    @classmethod
    def selects(cls, spec) -> bool:
        return spec.name == "toy-p2p"

    def plan(self) -> WorkloadPlan:
        return WorkloadPlan((PlannedOp(SIZE_BYTES, 0, False, "toy", collective="send", algorithm="chain",
                                       group="toy", groups=((0, 1),)),), ("toy: one message from h1 to h2",))

    def scaling_keys(self) -> str:
        return "the toy's SIZE_BYTES (or fabric.host_link_bps)"

    def run_ops(self, ctx, agents, rec, progress) -> None:
        op = ctx.ops_plan[0]
        recs = agents.run_op(0, op.size_bytes, op.groups, timeout_s=30, collective=op.collective,
                             algorithm=op.algorithm)
        rec.rank_rows.extend(recs)
        rec.op_meta[0] = op.meta()
        t_us = (max(r.t_end_ns for r in recs) - min(r.t_start_ns for r in recs)) / 1e3
        self.block = {"size_bytes": op.size_bytes, "sent_bytes": sum(r.sent_bytes for r in recs), "time_us": t_us,
                      "goodput_bps": op.size_bytes * 8 / (t_us / 1e6)}

    def add_results(self, ctx, rec, summary: dict, qps, ports, faults) -> None:
        """toy_p2p.json in the run directory: the message's figures and the bytes rank 1's QP from rank 0
        delivered (summary.json has one closed shape, testbed.results.shape; a kind's own file needs none)."""
        self.block["delivered_bytes"] = sum(q.counters.delivered_bytes for s in rec.stats for q in s.responders
                                            if q.rank == 1 and q.peer == 0)
        RunDir(ctx.run_dir).write_json("toy_p2p.json", self.block)

    def lines_after(self, ctx, summary: dict) -> list[str]:
        return [f"toy: {self.block['delivered_bytes']} B delivered in {self.block['time_us']:.0f} us"]


def test_a_toy_kind_registered_alone_runs_on_a_fabric(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(workloads, "WORKLOADS", {"toy_p2p": OneMessage, **workloads.WORKLOADS})
    spec = parse_scenario({"name": "toy-p2p", "fabric": {"spines": 1, "leaves": 1,
                                                         "hosts_per_leaf": 2, "host_link_bps": LINK_BPS,
                                                         "fabric_link_bps": LINK_BPS},
                           "workload": {"sizes": {"values": [SIZE_BYTES]}}})
    assert type(workloads.workload_for(spec)) is OneMessage
    out = run(spec, tmp_path, quiet=True)
    printed, errors = capfd.readouterr()
    assert out.run_dir is not None, f"exit {out.exit_code}\n{printed}\n{errors}"
    assert (out.run_dir / "toy_p2p.json").is_file(), f"exit {out.exit_code}\n{printed}\n{errors[-3000:]}"
    s = RunDir.open(out.run_dir).summary
    b = json.loads((out.run_dir / "toy_p2p.json").read_text())
    print(b, s["transport"])
    assert b["delivered_bytes"] == SIZE_BYTES and b["sent_bytes"] == SIZE_BYTES
    assert s["transport"]["delivered_bytes"] == SIZE_BYTES == s["transport"]["acked_bytes"]
    goodput_bps = LINK_BPS * s["payload_efficiency"]
    assert 0.5 * goodput_bps < b["goodput_bps"] <= 1.1 * goodput_bps, b   # one message at about the link's goodput
    (row,) = s["sizes"]
    assert row["size_bytes"] == SIZE_BYTES and row["group_size"] == 2
    assert f"toy: {SIZE_BYTES} B delivered in" in printed
    assert_faithful(s)
    assert out.exit_code == 0
