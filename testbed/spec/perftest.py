"""``workload.perftest``: unmodified verbs programs (Debian's perftest) between hosts over Soft-RoCE.

A list of perftest runs, run one after the other as the run's workload (testbed.workloads.perftest.workload):
each gives its two hosts an rxe device (``rdma_rxe``, Soft-RoCE) on their fabric interface for the
run (testbed.emulation.rxe), starts perftest's server on ``dst`` and its client on ``src``; their
RoCEv2 packets (UDP 4791) cross the emulated fabric like any other, through its shaping, ECMP, ECN
marking and PFC. Figures: perftest.csv (testbed.results.perftest), summary.json ``perftest``.

Keys of one run:

- ``test``: one of :data:`PERFTEST_TESTS` (``ib_write_bw``, ``ib_send_lat``, ...);
- ``src``, ``dst``: the client and the server, host names without the run id (``h1``) or ranks;
- ``size_bytes``: the message size (perftest ``-s``), 1 B .. 1 MiB;
- ``iterations``: messages (perftest ``-n``), 1 .. 100,000;
- ``name``: the run's name in the results (default ``<test><index>``).

Example::

    workload:
      perftest:
        - {test: ib_send_lat, src: h1, dst: h2, size_bytes: 64, iterations: 200}
        - {test: ib_write_bw, src: h1, dst: h2, size_bytes: 4KiB, iterations: 100}

Needs the ``rdma_rxe`` kernel module and perftest (Debian: ``perftest``, ``ibverbs-providers``,
``rdma-core``): :func:`check_machine` refuses the scenario before anything is built where either is
missing (our development machines' kernel has no rdma_rxe: run it in ``scripts/vm``, docs/vm.md).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import Field

from testbed.spec.units import Count, SizeBytes, SpecModel

#: the perftest programs a run may name: latency tests print t_typical/p99, bandwidth tests MB/s
PERFTEST_TESTS = ("ib_send_lat", "ib_write_lat", "ib_read_lat", "ib_send_bw", "ib_write_bw", "ib_read_bw")
#: largest message, bytes (a tiny emulated link moves 1 MiB in seconds)
MAX_SIZE_BYTES = 1024 * 1024
MAX_ITERATIONS = 100_000
#: runs one scenario may list
MAX_RUNS = 32
#: what a scenario needs where it is refused (the error names it)
FIX = ("run it in the guest of scripts/vm, whose Debian kernel has rdma_rxe "
       "(sudo scripts/vm -- .venv/bin/testbed run SCENARIO; docs/vm.md), with perftest installed "
       "(sudo scripts/install --vm installs perftest, rdma-core, ibverbs-providers)")

HostRef = Union[Count, str]


class PerftestRunSpec(SpecModel):
    """One perftest run (module docstring): ``test`` from ``src`` (client) to ``dst`` (server),
    ``iterations`` messages of ``size_bytes``."""

    #: the perftest program (Debian's perftest 4.5): latency tests report t_typical/p99, bandwidth tests MiB/s
    test: Literal[PERFTEST_TESTS]
    #: the client: a host name without the run id (``h1``) or a rank, 0-based
    src: HostRef
    #: the server, another host
    dst: HostRef
    #: message size, bytes (perftest -s)
    size_bytes: SizeBytes = Field(64, ge=1, le=MAX_SIZE_BYTES)
    #: messages (perftest -n)
    iterations: Count = Field(1000, ge=1, le=MAX_ITERATIONS)
    #: the run's name in perftest.csv (default ``<test><index>``), unique
    name: Optional[str] = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,32}$")

    def run_name(self, index: int) -> str:
        """``name``, or ``<test><index>``."""
        return self.name or f"{self.test}{index}"

    @property
    def is_latency(self) -> bool:
        """A latency test (``*_lat``: ping-pong, t_typical/p99), else a bandwidth test."""
        return self.test.endswith("_lat")


def _rank(ref, names: list[str], key: str) -> int:
    """The rank of host reference ``ref`` among ``names``; ValueError naming ``key`` and what is allowed."""
    if isinstance(ref, int) and 0 <= ref < len(names):
        return ref
    if isinstance(ref, str) and ref in names:
        return names.index(ref)
    raise ValueError(f"{key}: {ref!r} is not a host of this fabric: allowed {names[0]} .. {names[-1]} "
                     f"or a rank 0..{len(names) - 1}")


def check_runs(runs: list[PerftestRunSpec], host_names: list[str]) -> list[dict]:
    """Check ``workload.perftest`` against the fabric (``host_names``: short names in rank order).

    Returns one dict per run: ``name``, ``test``, ``src``, ``dst`` (ranks), ``size_bytes``,
    ``iterations``. Raises ValueError starting with the key path (``workload.perftest.0.test: ...``):
    an empty list, too many runs, an unknown test, an unknown host, src == dst, a name used twice."""
    if not runs:
        raise ValueError("workload.perftest: a non-empty list of perftest runs "
                         "({test, src, dst, size_bytes, iterations})")
    if len(runs) > MAX_RUNS:
        raise ValueError(f"workload.perftest: {len(runs)} runs; allowed at most {MAX_RUNS}")
    out, seen = [], {}
    for i, r in enumerate(runs):
        at = f"workload.perftest.{i}"
        src = _rank(r.src, host_names, f"{at}.src")
        dst = _rank(r.dst, host_names, f"{at}.dst")
        if src == dst:
            raise ValueError(f"{at}.dst: the same host as src ({host_names[src]}); perftest needs two hosts")
        name = r.run_name(i)
        if name in seen:
            raise ValueError(f"{at}.name: {name!r} is already workload.perftest.{seen[name]}'s name; names are unique")
        seen[name] = i
        out.append({"name": name, "test": r.test, "src": src, "dst": dst, "size_bytes": int(r.size_bytes),
                    "iterations": int(r.iterations)})
    return out


def rxe_available(modules_dir: Path = Path("/lib/modules")) -> bool:
    """Whether this kernel has Soft-RoCE: ``rdma_rxe`` loaded (/sys/module/rdma_rxe) or built as a module
    of the running kernel (``/lib/modules/<uname -r>/.../rdma_rxe.ko*``)."""
    if Path("/sys/module/rdma_rxe").exists():
        return True
    mod_dir = modules_dir / os.uname().release / "kernel" / "drivers" / "infiniband" / "sw" / "rxe"
    return any(mod_dir.glob("rdma_rxe.ko*"))


def check_machine(runs: list[PerftestRunSpec], rxe: Optional[bool] = None, which=shutil.which) -> None:
    """Refuse ``workload.perftest`` on a machine that cannot run it, before anything is built.

    ``rxe``: whether the kernel has rdma_rxe (default :func:`rxe_available`); ``which``: finds a program
    on PATH. Raises ValueError naming ``workload.perftest``, what is missing (the rdma_rxe module, the
    ``rdma`` tool, the perftest programs) and the fix (:data:`FIX`)."""
    missing = []
    if not (rxe_available() if rxe is None else rxe):
        missing.append(f"the kernel module rdma_rxe (Soft-RoCE; this kernel {os.uname().release} has none)")
    if which("rdma") is None:
        missing.append("the rdma tool (iproute2)")
    progs = sorted({r.test for r in runs if r.test in PERFTEST_TESTS})
    absent = [p for p in progs if which(p) is None]
    if absent:
        missing.append(f"perftest's {', '.join(absent)} (Debian package perftest)")
    if missing:
        raise ValueError(f"workload.perftest: this machine lacks {'; '.join(missing)}; {FIX}")
