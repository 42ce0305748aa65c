"""Find out, by really trying, what this machine supports, and pick backends.

:func:`probe` creates a few throwaway objects, all named with a run id prefix
and all removed before it returns:

- OVS bridges ``<rid>k`` (``datapath_type=system``) and ``<rid>u``
  (``datapath_type=netdev``): does each datapath really make a bridge?
- a named netns ``<rid>probe`` holding a veth pair ``<rid>p0``/``<rid>p1``, on
  which it adds each qdisc (pyroute2), an nftables netdev egress chain with the
  ECN-marking rule the fallback marker uses (``nft``), and turns checksum
  offload off (``ethtool``).

Chosen backends (docs/architecture.md, "Facts about the machines"):

- ``datapath``: ``'kernel'`` if a ``system`` bridge works, else ``'user'`` if a
  ``netdev`` bridge works, else ``'none'`` (OVS not running or not installed).
- ``ecn_marker``: ``'red'`` (sch_red with ``ecn``), else ``'nftables'`` (netdev
  egress rule with ``numgen random``), else ``'none'``.
- ``delay``: ``'netem'`` or ``'none'``.

Without root the netns-based tries cannot run; they are then reported as
"not probed: needs root" and count as unavailable.
"""
from __future__ import annotations

import errno
import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from testbed.host import acceleration
from testbed.host.timeout_scale import startup_s
from topology.naming import check_run_id, new_run_id

#: Qdiscs tried, in report order.
QDISCS = ("htb", "tbf", "red", "netem", "prio", "fq_codel", "clsact")
#: Programs looked up on PATH.
TOOLS = ("iperf3", "tcpdump", "tshark", "mnexec")
#: The rule the nftables ECN marker installs (probability 10 % here).
NFT_MARK_RULE = "ip ecn { ect0, ect1 } numgen random mod 1000 < 100 ip ecn set ce"

#: ovs-vsctl's wait in the probe, s, on the development machines; x TESTBED_TIMEOUT_SCALE (a loaded guest under
#: software emulation took longer than 5 s to add the probe's bridge: the run was refused, 2026-12-02)
_OVS_TIMEOUT_S = 5
NEEDS_ROOT = "run 'sudo testbed doctor'"
_LOCAL_OFPORT = "65534"  # OFPP_LOCAL: the bridge's own port exists once the datapath made it


@dataclass(frozen=True)
class Feature:
    """Outcome of one try: ``available`` and a one-line reason or location."""

    available: bool
    detail: str


@dataclass(frozen=True)
class Capabilities:
    """What this machine supports and which backend each feature uses.

    ``features`` maps names to :class:`Feature`: ``ovs``, ``ovs_kernel_datapath``,
    ``ovs_userspace_datapath``, ``qdisc_<kind>`` for each of :data:`QDISCS`,
    ``nft_egress``, ``ethtool``, each of :data:`TOOLS`, ``mininet_module``, ``acceleration``
    (testbed.host.acceleration: available when runs here go at hardware speed).
    """

    run_id: str
    kernel: str
    features: Mapping[str, Feature]
    datapath: str  # 'kernel' | 'user' | 'none'
    ecn_marker: str  # 'red' | 'nftables' | 'none'
    delay: str  # 'netem' | 'none'
    ovs_version: str = ""
    notes: tuple[str, ...] = field(default=())

    def has(self, name: str) -> bool:
        """Return whether feature ``name`` is available; KeyError names the known ones."""
        try:
            return self.features[name].available
        except KeyError:
            raise KeyError(
                f"unknown feature {name!r}; known: {', '.join(self.features)}"
            ) from None

    def has_qdisc(self, kind: str) -> bool:
        return self.has(f"qdisc_{kind}")

    def as_dict(self) -> dict:
        """Plain JSON-able dict for the run manifest."""
        return {
            "probe_run_id": self.run_id,
            "kernel": self.kernel,
            "ovs_version": self.ovs_version,
            "backends": {
                "datapath": self.datapath,
                "ecn_marker": self.ecn_marker,
                "delay": self.delay,
            },
            "features": {
                name: {"available": f.available, "detail": f.detail}
                for name, f in self.features.items()
            },
            "notes": list(self.notes),
        }


def probe(run_id: str | None = None) -> Capabilities:
    """Probe the machine; every object made is named ``<run_id>...`` and removed.

    Args:
        run_id: prefix for the throwaway objects. ``None`` picks a fresh id and,
            when the state dir is writable, holds its :class:`RunLock` during the
            probe so a concurrent ``testbed clean`` leaves the objects alone.
            Pass the run's own id from inside a run (which already holds its lock).

    Raises:
        ValueError: ``run_id`` is not ``tb`` + 4 hex digits.
    """
    if run_id is not None:
        return _probe(check_run_id(run_id))
    from testbed.host.runlock import RunLock, RunLockError

    rid = new_run_id()
    try:
        lock = RunLock(rid).__enter__()
    except (OSError, RunLockError):
        return _probe(rid)  # not root, or id clash (astronomically rare): probe unlocked
    try:
        return _probe(rid)
    finally:
        lock.release()


def _probe(rid: str) -> Capabilities:
    feats: dict[str, Feature] = {}
    notes: list[str] = []
    ovs_version = _probe_ovs(rid, feats)
    _probe_netns(rid, feats)
    for tool in TOOLS:
        path = shutil.which(tool)
        feats[tool] = Feature(bool(path), path or "absent")
    spec = importlib.util.find_spec("mininet")
    feats["mininet_module"] = Feature(
        spec is not None,
        str(Path(spec.origin).parent) if spec and spec.origin else "not importable",
    )
    feats["acceleration"] = Feature(*acceleration.probe())

    if feats["ovs_kernel_datapath"].available:
        datapath = "kernel"
    elif feats["ovs_userspace_datapath"].available:
        datapath = "user"
    else:
        datapath = "none"
        if os.geteuid() != 0:
            notes.append(f"not root: Open vSwitch, qdiscs, nftables and ethtool were not probed; {NEEDS_ROOT}")
        else:
            notes.append("no OVS datapath usable: " + feats["ovs"].detail)
    if feats["qdisc_red"].available:
        ecn = "red"
    elif feats["nft_egress"].available:
        ecn = "nftables"
    else:
        ecn = "none"
        if os.geteuid() == 0:
            notes.append("no ECN marking backend: neither sch_red nor the nftables egress hook")
    delay = "netem" if feats["qdisc_netem"].available else "none"
    return Capabilities(
        run_id=rid,
        kernel=os.uname().release,
        features=MappingProxyType(feats),
        datapath=datapath,
        ecn_marker=ecn,
        delay=delay,
        ovs_version=ovs_version,
        notes=tuple(notes),
    )


# --------------------------------------------------------------------- OVS


def _run(argv: list[str], timeout: float = 10, input: str | None = None):
    """Run a command, returning (rc, stdout, stderr); rc 127 if not found, 124 on timeout."""
    try:
        p = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout
        )
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(argv)}: timed out after {timeout}s"
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def _ovs_vsctl(*args: str, timeout: float = _OVS_TIMEOUT_S):
    """``ovs-vsctl ARGS`` waiting at most ``timeout`` x the machine's timeout scale (testbed.host.timeout_scale)."""
    wait_s = max(1, round(startup_s(timeout)))
    return _run(["ovs-vsctl", f"--timeout={wait_s}", *args], timeout=wait_s + 5)


def _kernel_module_state() -> str:
    """'loaded', 'loadable' (modprobe --dry-run finds it) or 'missing'."""
    if Path("/sys/module/openvswitch").exists():
        return "loaded"
    rc, _, _ = _run(["modprobe", "--dry-run", "--quiet", "openvswitch"])
    return "loadable" if rc == 0 else "missing"


def _try_bridge(name: str, datapath_type: str) -> tuple[bool, str]:
    """Add bridge ``name`` with ``datapath_type``, check it got its local port, delete it."""
    try:
        rc, _, err = _ovs_vsctl(
            "add-br", name, "--", "set", "bridge", name, f"datapath_type={datapath_type}"
        )
        if rc != 0 or "Error detected" in err:
            return False, (err.splitlines() or ["ovs-vsctl add-br failed"])[0]
        rc, ofport, err = _ovs_vsctl("get", "interface", name, "ofport")
        if ofport != _LOCAL_OFPORT:
            return False, f"bridge made but datapath did not open it (ofport {ofport or err})"
        return True, "bridge works"
    finally:
        _ovs_vsctl("--if-exists", "del-br", name)


def _probe_ovs(rid: str, feats: dict[str, Feature]) -> str:
    module = _kernel_module_state()
    module_text = {
        "loaded": "openvswitch kernel module loaded",
        "loadable": "openvswitch kernel module loadable but not loaded",
        "missing": "no openvswitch kernel module",
    }[module]
    if not shutil.which("ovs-vsctl"):
        off = Feature(False, "Open vSwitch not installed (run scripts/install)")
        feats.update(ovs=off, ovs_kernel_datapath=off, ovs_userspace_datapath=off)
        return ""
    rc, _, err = _ovs_vsctl("show", timeout=2)
    if rc != 0 and os.geteuid() != 0:
        # an ordinary user cannot open OVS's database socket: that says nothing about whether OVS runs
        off = Feature(False, f"not probed: needs root ({NEEDS_ROOT})")
        feats.update(ovs=off, ovs_userspace_datapath=off)
        feats["ovs_kernel_datapath"] = Feature(False, module_text + "; OVS not probed: needs root")
        return ""
    if rc != 0:
        off = Feature(False, f"OVS not reachable ({err}); start it with scripts/start-ovs as root")
        feats.update(ovs=off, ovs_userspace_datapath=off)
        feats["ovs_kernel_datapath"] = Feature(False, module_text + "; OVS not reachable")
        return ""
    _, version, _ = _ovs_vsctl("get", "Open_vSwitch", ".", "ovs_version", timeout=2)
    version = version.strip('"')
    feats["ovs"] = Feature(True, f"running, ovs_version {version or '?'}")
    if module == "loaded":
        ok, why = _try_bridge(f"{rid}k", "system")
        feats["ovs_kernel_datapath"] = Feature(ok, module_text if ok else f"{module_text}; {why}")
    else:
        feats["ovs_kernel_datapath"] = Feature(False, module_text)
    ok, why = _try_bridge(f"{rid}u", "netdev")
    feats["ovs_userspace_datapath"] = Feature(ok, why)
    return version


# --------------------------------------------------------- qdiscs, nft, ethtool


def _probe_netns(rid: str, feats: dict[str, Feature]) -> None:
    """Try qdiscs, the nft egress hook and ethtool on a veth in netns ``<rid>probe``."""
    names = [f"qdisc_{k}" for k in QDISCS] + ["nft_egress", "ethtool"]
    if os.geteuid() != 0:
        for n in names:
            feats[n] = Feature(False, "not probed: needs root")
        return
    try:
        from pyroute2 import IPRoute, netns
    except ImportError as exc:  # pragma: no cover - pyroute2 is a hard requirement
        for n in names:
            feats[n] = Feature(False, f"not probed: {exc}")
        return
    ns, dev, peer = f"{rid}probe", f"{rid}p0", f"{rid}p1"
    try:
        netns.create(ns)
    except OSError as exc:
        for n in names:
            feats[n] = Feature(False, f"not probed: cannot create netns {ns}: {exc}")
        return
    try:
        with IPRoute(netns=ns) as ipr:
            ipr.link("add", ifname=dev, kind="veth", peer=peer)
            idx = ipr.link_lookup(ifname=dev)[0]
            for ifname in (dev, peer):
                ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], state="up")
            for kind in QDISCS:
                feats[f"qdisc_{kind}"] = _try_qdisc(ipr, idx, kind, ns, dev)
        feats["nft_egress"] = _try_nft(ns, dev, rid)
        feats["ethtool"] = _try_ethtool(ns, dev)
    except Exception as exc:  # a broken probe must not hide the other results
        for n in names:
            feats.setdefault(n, Feature(False, f"not probed: {type(exc).__name__}: {exc}"))
    finally:
        try:
            netns.remove(ns)  # takes the veth pair and the nft table with it
        except OSError:
            pass


#: Real configurations tried for the qdiscs pyroute2 can encode.
_QDISC_ARGS = {
    "htb": {"default": 0x10},
    "tbf": {"rate": "10mbit", "burst": 10000, "latency": "50ms"},
    "netem": {"delay": 1000},  # microseconds
    "prio": {"bands": 3, "priomap": [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]},
    "fq_codel": {},
    "clsact": {},
}


def _try_qdisc(ipr, idx: int, kind: str, ns: str, dev: str) -> Feature:
    from pyroute2.netlink.exceptions import NetlinkError
    from pyroute2.netlink.rtnl import TC_H_ROOT

    if kind == "red":
        return _try_red(ipr, idx, ns, dev)
    try:
        ipr.tc("add", kind, idx, **_QDISC_ARGS[kind])
    except NetlinkError as exc:
        if exc.code == errno.ENOENT:
            return Feature(False, f"kernel has no sch_{kind}")
        return Feature(False, f"rejected: {exc}")
    try:
        if kind == "clsact":
            ipr.tc("del", "clsact", idx)
        else:
            ipr.tc("del", index=idx, parent=TC_H_ROOT)
    except NetlinkError:
        pass  # the netns goes away anyway
    return Feature(True, "works")


def _try_red(ipr, idx: int, ns: str, dev: str) -> Feature:
    """The configuration the RED queue backend installs (dataplane.queues.sch_red: ECN, Wlog 0, stab,
    max_P): ENOENT means the kernel lacks sch_red."""
    from pyroute2.netlink.exceptions import NetlinkError
    from pyroute2.netlink.rtnl import TC_H_ROOT

    from dataplane.queues import sch_red

    _cmd, kind, attrs = sch_red.red_request(idx, 0x10000, TC_H_ROOT, 400_000, 30_000, 90_000, 0.1)
    try:
        ipr.tc("add", kind, **attrs)
    except NetlinkError as exc:
        if exc.code == errno.ENOENT:
            return Feature(False, "kernel has no sch_red")
        return Feature(False, f"sch_red present but 'red ... ecn' rejected: {exc}")
    try:
        ipr.tc("del", index=idx, parent=TC_H_ROOT)
    except NetlinkError:
        pass  # the netns goes away anyway
    return Feature(True, "works with ecn")


def _try_nft(ns: str, dev: str, rid: str) -> Feature:
    if not shutil.which("nft"):
        return Feature(False, "nft not installed")
    ruleset = (
        f"table netdev {rid}probe {{\n"
        f"  chain egress {{\n"
        f'    type filter hook egress device "{dev}" priority 0; policy accept;\n'
        f"    {NFT_MARK_RULE}\n"
        f"  }}\n"
        f"}}\n"
    )
    rc, _, err = _run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=ruleset)
    if rc != 0:
        return Feature(False, f"netdev egress rule rejected: {err.splitlines()[0] if err else rc}")
    return Feature(True, "netdev egress hook, numgen random, ip ecn set ce")


def _try_ethtool(ns: str, dev: str) -> Feature:
    if not shutil.which("ethtool"):
        return Feature(False, "ethtool not installed")
    rc, _, err = _run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, "tx", "off", "rx", "off"])
    if rc != 0:
        return Feature(False, f"'ethtool -K {dev} tx off rx off' failed: {err}")
    return Feature(True, "checksum offload can be turned off")


# ------------------------------------------------------------------ report

_LABEL_WIDTH = 18


def _line(label: str, value: str) -> str:
    return f"{label} {'.' * max(3, _LABEL_WIDTH - len(label))} {value}"


def format_report(caps: Capabilities) -> str:
    """Return a human-readable table of ``caps``, one feature per line."""
    f = caps.features
    lines = [f"testbed doctor: kernel {caps.kernel}, probe objects prefixed {caps.run_id}"]
    lines.append(_line("ovs", f["ovs"].detail))
    if caps.datapath == "kernel":
        dp = f"kernel (system): {f['ovs_kernel_datapath'].detail}"
    elif caps.datapath == "user":
        dp = f"userspace (netdev): {f['ovs_kernel_datapath'].detail}"
    else:
        dp = f"none: {f['ovs_userspace_datapath'].detail}"
    lines.append(_line("ovs datapath", dp))
    for kind in QDISCS:
        feat = f[f"qdisc_{kind}"]
        label = "clsact" if kind == "clsact" else f"sch_{kind}"
        if feat.available:
            value = "present"
        elif feat.detail.startswith("not probed"):  # without root: unknown, not absent
            lines.append(_line(label, f"unknown ({feat.detail})"))
            continue
        elif feat.detail.startswith("kernel has no"):
            value = "absent"
        else:
            value = f"absent ({feat.detail})"
        if kind == "red" and not feat.available:
            value += {
                "nftables": " -> ECN marking uses nftables fallback marker",
                "none": " -> no ECN marking backend",
            }.get(caps.ecn_marker, "")
        if kind == "netem" and not feat.available:
            value += " -> no added link delay"
        lines.append(_line(label, value))
    nft = f["nft_egress"]
    unknown = lambda feat: "unknown" if feat.detail.startswith("not probed") else "absent"  # noqa: E731
    lines.append(_line("nft egress hook", "present" if nft.available else f"{unknown(nft)} ({nft.detail})"))
    eth = f["ethtool"]
    lines.append(_line("ethtool", "works" if eth.available else f"{unknown(eth)} ({eth.detail})"))
    for tool in TOOLS:
        lines.append(_line(tool, f[tool].detail))
    lines.append(_line("mininet module", f["mininet_module"].detail))
    if "acceleration" in f:
        lines.append(_line("acceleration", f["acceleration"].detail))
    lines.append(
        f"backends: datapath={caps.datapath} ecn_marker={caps.ecn_marker} delay={caps.delay}"
    )
    lines.extend(f"note: {n}" for n in caps.notes)
    return "\n".join(lines)
