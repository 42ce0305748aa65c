"""Highest faithful link rate of a plain UDP ring and of the testbed, side by side on the same fabric.

Both sides run in one invocation on the fabric shape of a scenario (default
``scenarios/quickstart.yaml``: 2 spines, 4 leaves, 8 hosts), at each frame size
(RoCE path MTU 1024 on 1500-byte links, 4096 on 4200-byte links), stepping the
link rate (host and fabric links alike) until the first step that is not faithful:

* side A, plain UDP: the same :class:`testbed.emulation.fabric.Fabric` (same
  controller, OVS flows, shaping qdiscs and queues), no agents, no congestion
  loop, no queue sampler; every host sends UDP frames of the data packets' wire
  size to the next host of the ring, paced by its NIC's shaper at the link rate
  (:mod:`benchmarks.instruments.udp_ring`). Judged by the fidelity verdict's
  checks that apply: per-core CPU idle (the run's thresholds), drops outside
  the emulated queues, every host NIC fed and every receiver served within the
  link-rate band, no datagram lost unexplained, Open vSwitch's send socket.
* side B, the testbed: ``testbed run`` of a ring all-reduce on that fabric (a
  scenario made from the base one: its fabric at the step's rate and link MTU,
  its transport at the path MTU with the same window and ACK spacing in bytes,
  one size that lasts about ``--op-s`` per operation), judged by the product's
  own verdict (summary.json ``faithful``).

It prints one line per step (rate, delivered rate, least idle core, verdict and
its first violation), then per frame size the highest faithful rate of each side
and their ratio (issue target: testbed >= 0.8 x plain UDP). The first step that
is not faithful is run once more (a confirmation; ``--no-confirm`` or ``--quick``
skip it): the rate counts when either run was faithful, since a neighbour's burst
of CPU can fail one run. Needs root and a running Open vSwitch; everything a step
builds is removed after it, also on Ctrl-C. On a shared machine, serialise the
steps with the machine's fabric lock (taken per step, so other runs get turns)::

    python benchmarks/udp_ring_vs_testbed.py --lock /tmp/fabric.lock            # ~6 min of steps
    python benchmarks/udp_ring_vs_testbed.py --lock /tmp/fabric.lock --quick    # no confirmations, ~5 min

``--quick`` keeps the step lengths: the verdict allows one saturated CPU second in
any run under 20 s, so shorter steps are judged more leniently (with 4 s steps a
testbed run with a core pegged passed at 30 Mbit/s, path MTU 1024, where 7 s
steps failed at 10-15) and the figures stop being comparable. Each step is about
13 s (a fabric build of ~2 s, 1 s warm-up and a 7 s window for side A; ``testbed
run`` with one warm-up and two timed all-reduces of ~2 s for side B).

Options: ``--frames 1024,4096`` (RoCE path MTUs), ``--rates 5,7.5,10,15,20,30,40,60,80,100`` (Mbit/s per link),
``--side a|b|both``, ``--scenario FILE``, ``--no-confirm``, ``--window-s``, ``--op-s``, ``--json FILE``
(every step as JSON), ``--run-arg ARG`` (passed to ``testbed run``, repeatable).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the checkout's packages first
    sys.path.insert(0, str(REPO))

from testbed.process import signals  # noqa: E402
from testbed.host.runlock import held_flock  # noqa: E402
from testbed.measure.capacity import machine_facts  # noqa: E402
from testbed.measure.link_model import data_frame_bytes  # noqa: E402
from testbed.spec.yaml_loader import load_yaml  # noqa: E402
from traffic import collectives  # noqa: E402

#: link MTU for each RoCE path MTU (the quickstart's 4200 carries a 4096-byte payload)
LINK_MTU_FOR = {1024: 1500, 2048: 2100, 4096: 4200}
DEFAULT_RATES_MBPS = (5, 7.5, 10, 15, 20, 30, 40, 60, 80, 100)
DEFAULT_SCENARIO = REPO / "scenarios" / "quickstart.yaml"
#: issue target: the testbed's highest faithful rate over the plain UDP ring's
TARGET_RATIO = 0.8


@dataclass
class Step:
    """One judged step of one side: ``side`` "A" (plain UDP) or "B" (testbed), ``payload_bytes`` (RoCE
    path MTU), ``rate_bps`` (every link), ``delivered_bps`` (A: the slowest receiver's frame rate; B:
    busbw/link x rate), ``min_core_idle_pct`` (the least idle core in any 1 s sample), ``faithful``,
    ``violation`` (the first, "" when faithful), ``attempt`` (1, or 2 for a confirmation), ``seconds``
    (wall time of the step, build and teardown included), ``figures`` (side A: CPU per component)."""

    side: str
    payload_bytes: int
    rate_bps: float
    delivered_bps: float
    min_core_idle_pct: float
    faithful: bool
    violation: str
    attempt: int = 1
    seconds: float = 0.0
    figures: dict | None = None

    def line(self) -> str:
        ratio = self.delivered_bps / self.rate_bps if self.rate_bps else math.nan
        verdict = "faithful" if self.faithful else f"NOT faithful: {self.violation[:150]}"
        retry = " (confirmation)" if self.attempt > 1 else ""
        cpu = ""
        if self.figures:
            cpu = " [cores: ovs {ovs_vswitchd_cores:.2f}, softirq {softirq_cores:.2f}, senders {senders_cores:.2f}, " \
                  "receivers {receivers_cores:.2f}]".format(**self.figures)
        return (f"{self.side} {self.payload_bytes:>5} B {self.rate_bps / 1e6:>5g} Mbit/s{retry}: delivered "
                f"{self.delivered_bps / 1e6:6.2f} Mbit/s ({ratio:.3f}), min core idle {self.min_core_idle_pct:5.1f}%, "
                f"{verdict}{cpu} ({self.seconds:.0f} s)")


# -- scenarios ---------------------------------------------------------------------------------------------------

def base_scenario(path: Path) -> dict:
    """The base scenario's mapping (its fabric shape and transport), read with the product's YAML loader."""
    data = load_yaml(path.read_text(), str(path))
    if not isinstance(data, dict) or "fabric" not in data:
        raise SystemExit(f"{path}: not a scenario with a fabric section")
    return data


def scenario_for(base: dict, payload_bytes: int, rate_bps: float, size_bytes: int | None = None,
                 iterations: int = 2) -> dict:
    """The base scenario at one step: every link at ``rate_bps`` and the link MTU of ``payload_bytes``
    (:data:`LINK_MTU_FOR`); the transport at path MTU ``payload_bytes`` with the base's window and ACK
    spacing kept in bytes; a ring all-reduce of ``size_bytes`` per rank (one warm-up, ``iterations`` timed).
    ``size_bytes`` None: the workload is the base's (side A does not run it)."""
    if payload_bytes not in LINK_MTU_FOR:
        raise ValueError(f"path MTU {payload_bytes}: allowed {', '.join(map(str, LINK_MTU_FOR))}")
    bt = dict(base.get("transport") or {})
    base_payload = int(bt.get("payload_bytes", 1024))
    window_bytes = int(bt.get("window_pkts", 64)) * base_payload
    ack_bytes = int(bt.get("ack_every_pkts", 8)) * base_payload
    out = {k: v for k, v in base.items() if k not in ("name", "workload", "fabric", "transport")}
    out["name"] = f"udpbench-{payload_bytes}-{rate_bps / 1e6:g}M"
    out["fabric"] = {**base["fabric"], "host_link_bps": int(rate_bps), "fabric_link_bps": int(rate_bps),
                     "mtu_bytes": LINK_MTU_FOR[payload_bytes]}
    out["transport"] = {**bt, "payload_bytes": payload_bytes,
                        "window_pkts": max(4, window_bytes // payload_bytes),
                        "ack_every_pkts": max(1, ack_bytes // payload_bytes)}
    out["workload"] = base.get("workload") if size_bytes is None else {
        "collective": "allreduce", "algorithm": "ring", "sizes": {"min_bytes": size_bytes, "max_bytes": size_bytes},
        "iterations": iterations, "warmup_iterations": 1}
    return out


def size_for(rate_bps: float, payload_bytes: int, n_ranks: int, op_s: float) -> int:
    """Per-rank size (whole packets per rank) of a ring all-reduce that takes about ``op_s`` at ``rate_bps``:
    time = busbw_factor x S x 8 / (rate x payload / frame) (nccl-tests busbw)."""
    goodput_bps = rate_bps * payload_bytes / data_frame_bytes(payload_bytes)
    size = op_s * goodput_bps / 8 / collectives.busbw_factor("allreduce", "ring", n_ranks)
    unit = payload_bytes * n_ranks
    return max(unit, int(size) // unit * unit)


# -- side A: plain UDP ring --------------------------------------------------------------------------------------

def step_udp(base: dict, payload_bytes: int, rate_bps: float, datapath: str, window_s: float,
             lock_file: str | None) -> Step:
    """Build the fabric at one step, run the plain UDP ring (benchmarks.instruments.udp_ring), tear it down."""
    from benchmarks.instruments.udp_ring import run_ring
    from testbed.emulation.fabric import Fabric
    from testbed.host.runlock import RunLock
    from testbed.measure.send_buffer import check_run_send_buffer
    from testbed.spec.scenario import parse_scenario
    from topology.naming import new_run_id

    spec = parse_scenario(scenario_for(base, payload_bytes, rate_bps), "udp ring step")
    with held_flock(lock_file):
        t0 = time.monotonic()
        send_buffer = check_run_send_buffer(spec, datapath)
        rid = new_run_id()
        with tempfile.TemporaryDirectory(prefix=f"{rid}-") as tmp, RunLock(rid), \
                Fabric(spec, rid, Path(tmp), datapath) as fab:
            st = run_ring(fab, payload_bytes, duration_s=window_s, send_buffer=send_buffer)
    return Step("A", payload_bytes, rate_bps, st.min_delivered_bps, st.min_core_idle_pct, st.faithful, st.violation,
                seconds=time.monotonic() - t0, figures=st.figures)


# -- side B: the testbed -----------------------------------------------------------------------------------------

def _run_cli(args: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    """``testbed`` as a child; on Ctrl-C or SIGTERM the child gets SIGINT and is awaited (it tears down)."""
    proc = subprocess.Popen([sys.executable, "-m", "testbed.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def step_testbed(base: dict, payload_bytes: int, rate_bps: float, op_s: float, iterations: int,
                 lock_file: str | None, run_args: list[str]) -> Step:
    """One ``testbed run`` of the ring all-reduce at one step; its verdict."""
    import yaml

    from testbed.results.rundir import RunDir

    n_ranks = int(base["fabric"].get("hosts_per_leaf", 1)) * int(base["fabric"].get("leaves", 1))
    size = size_for(rate_bps, payload_bytes, n_ranks, op_s)
    scen = scenario_for(base, payload_bytes, rate_bps, size, iterations)
    with tempfile.TemporaryDirectory(prefix="udpbench-b-") as tmp:
        path = Path(tmp) / f"{scen['name']}.yaml"
        path.write_text(yaml.safe_dump(scen, sort_keys=False))
        out = Path(tmp) / "results"
        with held_flock(lock_file):
            t0 = time.monotonic()
            # --over-capacity: the steps are meant to find the edge; the verdict, not the pre-run capacity check, judges
            proc = _run_cli(["run", str(path), "--results", str(out), "--quiet", "--over-capacity", *run_args],
                            timeout_s=900)
            seconds = time.monotonic() - t0
        found = list(out.glob("*/summary.json"))
        if not found:
            why = (proc.stderr or proc.stdout).strip().splitlines()
            return Step("B", payload_bytes, rate_bps, 0.0, math.nan, False,
                        f"testbed run exited {proc.returncode}: {why[-1] if why else ''}", seconds=seconds)
        s = RunDir.open(found[0].parent).summary
    busbw = s["sizes"][-1]["busbw_ratio"] if s.get("sizes") else 0.0
    cpu = (s.get("fidelity") or {}).get("cpu", {}) if isinstance(s.get("fidelity"), dict) else {}
    violation = s["violations"][0] if s.get("violations") else (
        "" if s.get("faithful") else "not judged: " + "; ".join(s.get("not_judged") or []))
    return Step("B", payload_bytes, rate_bps, busbw * rate_bps, float(cpu.get("min_single_cpu_idle_pct", math.nan)),
                bool(s.get("faithful")), violation, seconds=seconds)


# -- the sweep ---------------------------------------------------------------------------------------------------

def sweep(run_step, rates_bps: list[float], confirm: bool, say) -> list[Step]:
    """Steps at rising rates until the first unfaithful one (with ``confirm``: unfaithful twice in a row at
    that rate); returns every step run."""
    steps: list[Step] = []
    for rate in rates_bps:
        st = run_step(rate)
        steps.append(st)
        say(st.line())
        if not st.faithful and confirm:
            again = run_step(rate)
            again.attempt = 2
            steps.append(again)
            say(again.line())
            st = again
        if not st.faithful:
            break
    return steps


def highest_faithful(steps: list[Step]) -> tuple[float, Step | None]:
    """(highest rate reached by faithful steps before the first rate that failed every attempt, that step)."""
    best, limit = 0.0, None
    by_rate: dict[float, list[Step]] = {}
    for st in steps:
        by_rate.setdefault(st.rate_bps, []).append(st)
    for rate in sorted(by_rate):
        if any(s.faithful for s in by_rate[rate]):
            best = rate
        else:
            limit = by_rate[rate][-1]
            break
    return best, limit


def summary_lines(results: dict[int, dict[str, list[Step]]]) -> list[str]:
    """The table: per frame size the highest faithful rate of each side, their ratio and what limited each."""
    out = [f"{'path MTU':>8} | {'plain UDP ring':>14} | {'testbed':>8} | {'ratio':>5} | target >= {TARGET_RATIO}"]
    notes = []
    for payload, sides in results.items():
        cells = {}
        for side in ("A", "B"):
            steps = sides.get(side)
            if steps is None:
                cells[side] = None
                continue
            best, limit = highest_faithful(steps)
            top = max(s.rate_bps for s in steps)
            cells[side] = best
            name = "plain UDP" if side == "A" else "testbed"
            if limit is not None:
                notes.append(f"{payload} B {name}: limited at {limit.rate_bps / 1e6:g} Mbit/s by: {limit.violation}")
            else:
                notes.append(f"{payload} B {name}: every step faithful up to {top / 1e6:g} Mbit/s (a lower bound)")
        a, b = cells["A"], cells["B"]
        ratio = f"{b / a:.2f}" if a and b is not None else "-"
        fmt = lambda v: "-" if v is None else f"{v / 1e6:g} Mbit/s"  # noqa: E731
        out.append(f"{payload:>8} | {fmt(a):>14} | {fmt(b):>8} | {ratio:>5} |")
    return out + notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", type=Path, default=DEFAULT_SCENARIO, help="base scenario (its fabric shape)")
    ap.add_argument("--frames", default="1024,4096", help="RoCE path MTUs, bytes (1024, 2048, 4096)")
    ap.add_argument("--rates", default=",".join(map(str, DEFAULT_RATES_MBPS)), help="link rates, Mbit/s, rising")
    ap.add_argument("--side", choices=("a", "b", "both"), default="both")
    ap.add_argument("--quick", action="store_true", help="no confirmation runs (same step lengths)")
    ap.add_argument("--confirm", action=argparse.BooleanOptionalAction, default=None,
                    help="run the first unfaithful step once more before stopping (default: on, off with --quick)")
    ap.add_argument("--window-s", type=float, default=7.0,
                    help="side A judged window, s (default 7: about side B's traffic time)")
    ap.add_argument("--op-s", type=float, default=2.0, help="side B seconds per all-reduce (default 2)")
    ap.add_argument("--iterations", type=int, default=2, help="side B timed iterations (after one warm-up)")
    ap.add_argument("--lock", default=None, help="flock this file around each step (a machine's fabric lock)")
    ap.add_argument("--json", type=Path, default=None, help="write every step and the summary here")
    ap.add_argument("--run-arg", action="append", default=[], help="extra argument for 'testbed run' (repeatable)")
    args = ap.parse_args(argv)
    frames = [int(x) for x in args.frames.split(",") if x]
    rates = [float(x) * 1e6 for x in args.rates.split(",") if x]
    if rates != sorted(rates):
        ap.error("--rates must rise")
    bad = [f for f in frames if f not in LINK_MTU_FOR]
    if bad:
        ap.error(f"--frames {bad}: allowed {sorted(LINK_MTU_FOR)}")
    # side A's window about as long as side B's traffic ((1 + iterations) x op_s and the agents' start), so that
    # the CPU check (one saturated second allowed in runs under 20 s) is as strict on both sides
    window_s, op_s = args.window_s, args.op_s
    confirm = (not args.quick) if args.confirm is None else args.confirm
    if os.geteuid() != 0:
        print("udp_ring_vs_testbed: needs root (builds fabrics)", file=sys.stderr)
        return 2
    # SIGINT/SIGTERM unwind like testbed run's: context managers tear down what they built, forked
    # children (pyroute2's) exit at once, a second signal cannot cut the teardown short
    signals.install()
    base = base_scenario(args.scenario)

    def say(line: str) -> None:
        print(line, flush=True)

    from testbed.host.capabilities import probe

    with held_flock(args.lock):
        datapath = probe().datapath
    if datapath == "none":
        print("udp_ring_vs_testbed: Open vSwitch is not usable (scripts/start-ovs)", file=sys.stderr)
        return 2
    f = base["fabric"]
    facts = machine_facts(datapath)
    started_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    say(f"# udp_ring_vs_testbed {started_utc}: fabric of {args.scenario.name} "
        f"({f.get('spines')} spines, {f.get('leaves')} leaves, {f.get('hosts_per_leaf')} hosts per leaf), "
        f"{facts['cores']} cores ({facts['cpu_model']}), kernel {facts['kernel']}, {datapath} datapath; "
        f"A: plain UDP ring, {window_s:g} s window; B: testbed ring all-reduce, {op_s:g} s per operation"
        + ("; the first unfaithful step confirmed once" if confirm else ""))
    results: dict[int, dict[str, list[Step]]] = {}
    t0 = time.monotonic()
    for payload in frames:
        say(f"# path MTU {payload} (frames {data_frame_bytes(payload)} B, link MTU {LINK_MTU_FOR[payload]})")
        results[payload] = {}
        if args.side in ("a", "both"):
            results[payload]["A"] = sweep(
                lambda r: step_udp(base, payload, r, datapath, window_s, args.lock), rates, confirm, say)
        if args.side in ("b", "both"):
            results[payload]["B"] = sweep(
                lambda r: step_testbed(base, payload, r, op_s, args.iterations, args.lock, args.run_arg),
                rates, confirm, say)
    busy_s = sum(x.seconds for sides in results.values() for steps in sides.values() for x in steps)
    say(f"# highest faithful rate per link ({time.monotonic() - t0:.0f} s in all, {busy_s:.0f} s of steps)")
    table = summary_lines(results)
    for line in table:
        say(line)
    if args.json:
        args.json.write_text(json.dumps({"machine": facts, "measured_utc": started_utc, "scenario": str(args.scenario),
                                         "window_s": window_s, "op_s": op_s, "confirm": confirm, "summary": table,
                                         "steps": {str(p): {s: [asdict(x) for x in v] for s, v in sides.items()}
                                                   for p, sides in results.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("udp_ring_vs_testbed: interrupted; what the step built was removed", file=sys.stderr)
        sys.exit(130)
