"""CPU cost of packet captures (``output.pcap``): one scenario run with and without tcpdump on the given ports.

Runs ``testbed run`` on the scenario as it is (its ``output.pcap`` removed) and again with
``output.pcap: {ports: PORTS}``, alternating, ``--repeat`` times each, and prints per run the fidelity
verdict, the CPU idle figures of summary.json (mean and least idle of all cores, least idle of one
core, seconds saturated) and the packets captured. Needs root; hold /tmp/fabric.lock around it.

Usage: ``python benchmarks/capture_cost.py SCENARIO.yaml [--ports h1 l1-h1 | --ports all] [--repeat 2]``
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from testbed.results.rundir import RunDir


def _run(scenario: dict, results: Path, name: str) -> dict:
    path = results / f"{name}.yaml"
    path.write_text(yaml.safe_dump(scenario))
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(path), "--results", str(results / name),
                          "--quiet"], capture_output=True, text=True)
    run_dir = next((results / name).glob("*/summary.json")).parent
    run = RunDir.open(run_dir)
    summary, manifest = run.summary, run.manifest
    cpu = summary["fidelity"]["cpu"]
    files = (manifest.get("pcap") or {}).get("files", [])
    return {"rc": res.returncode, "faithful": summary["faithful"], "mean_idle_pct": round(cpu["mean_idle_pct"], 1),
            "min_idle_pct": round(cpu["min_idle_pct"], 1),
            "min_single_cpu_idle_pct": round(cpu["min_single_cpu_idle_pct"], 1),
            "saturated_s": cpu["saturated_s"], "violations": summary["violations"],
            "busbw_ratio_by_size": {r.get("size_bytes"): r.get("busbw_ratio") for r in (summary.get("sizes") or [])},
            "pcap_files": len(files), "pcap_packets": sum(f["packets"] for f in files),
            "tcpdump_cpu_s": (manifest.get("pcap") or {}).get("cpu_s"),
            "pcap_dropped_by_kernel": sum(f["dropped_by_kernel"] or 0 for f in files)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", type=Path)
    ap.add_argument("--ports", nargs="+", default=["all"])
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    base = yaml.safe_load(args.scenario.read_text())
    base.setdefault("output", {}).pop("pcap", None)
    with_pcap = json.loads(json.dumps(base))
    with_pcap["output"]["pcap"] = {"ports": args.ports, "snaplen_bytes": 128, "max_bytes": "200MB"}
    with tempfile.TemporaryDirectory(prefix="capture_cost-") as tmp:
        for i in range(args.repeat):
            for label, scenario in (("without", base), ("with", with_pcap)):
                print(label, " ".join(args.ports) if label == "with" else "", json.dumps(
                    _run(scenario, Path(tmp), f"{label}{i}")), flush=True)


if __name__ == "__main__":
    main()
