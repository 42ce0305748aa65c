"""Issue 31 item 7: the CLI's ``collective`` prints busbw/link by the run's formula (busbw / (link x payload
efficiency), testbed.results.tables.size_table), not busbw / link (seen: 0.980 where the run's table said 0.995).

No fabric: the agents' records of one all-reduce are given (the subject is the figures made of them)."""
import re
from pathlib import Path

import pytest

from testbed.emulation import agents as agents_mod
from testbed.pipeline import interactive
from testbed.pipeline.context import RunContext
from testbed.results import tables
from testbed.workloads import load_scenario
from traffic.protocol import OpDone
from traffic.transport import payload_efficiency

REPO = Path(__file__).resolve().parent.parent
SIZE_BYTES = 1 << 20


def _records(n: int, span_ns: int) -> list[OpDone]:
    t0 = 1_800_000_000_000_000_000
    return [OpDone(op_id=0, rank=r, group_index=0, group_size=n, t_start_ns=t0 + r * 1000,
                   t_end_ns=t0 + span_ns - (n - 1 - r) * 2000, sent_bytes=SIZE_BYTES, rx_msgs=1,
                   t_rx_done_ns=t0 + span_ns) for r in range(n)]


class _FakeAgents:
    """AgentGroup's context manager and run_op, answering with ``records``."""
    records: list = []

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run_op(self, op_id, size_bytes, groups, timeout_s, collective="allreduce", algorithm="ring", stream=0):
        return [r for r in self.records]


@pytest.fixture
def cli(tmp_path, monkeypatch):
    spec = load_scenario(REPO / "scenarios" / "quickstart.yaml")
    ctx = RunContext.new(spec, None, tmp_path, "tb0a31", ())
    ctx.run_dir.mkdir(parents=True)
    fab = type("Fab", (), {"run_id": "tb0a31"})()
    monkeypatch.setattr(agents_mod, "AgentGroup", _FakeAgents)
    c = interactive.TestbedCLI.__new__(interactive.TestbedCLI)  # Mininet's CLI runs its loop in __init__
    c.ctx, c.fab, c.rid, c._collectives_run = ctx, fab, "tb0a31", 0
    return c


def test_cli_collective_prints_the_run_tables_busbw_ratio(cli, capsys):
    spec = cli.ctx.spec
    n = spec.fabric.n_hosts
    # a 1 MiB ring all-reduce on 8 ranks at 0.995 of the links' goodput (10 Mbit/s x 4096/4150)
    goodput_bps = spec.fabric.host_link_bps * payload_efficiency(spec.transport.payload_bytes)
    span_ns = round(2 * (n - 1) / n * SIZE_BYTES * 8 / (0.995 * goodput_bps) * 1e9)
    _FakeAgents.records = _records(n, span_ns)

    cli.do_collective("allreduce 1MiB")
    line = capsys.readouterr().out.strip()

    # the run's own table of these records
    ops = tables.ops_table(_FakeAgents.records, {0: {"size_bytes": SIZE_BYTES, "iteration": 0, "warmup": False}}, n)
    row = tables.size_table(ops, n, cli.ctx.goodput_bps).iloc[0]
    assert f"{row.busbw_ratio:.3f}" == "0.995"
    printed = float(re.search(r"busbw/link (\d+\.\d+)", line).group(1))
    assert printed == pytest.approx(row.busbw_ratio, abs=0.0005), line  # main printed 0.981 (busbw / link)
    assert f"busbw {row.busbw_bps / 1e6:.3f} Mbit/s" in line and f"time {row.time_us:.0f} us" in line, line
    assert "link x efficiency" in line, line  # says which formula, as the run's table title does
