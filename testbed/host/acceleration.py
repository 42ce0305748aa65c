"""Which acceleration this machine runs under, and which a ``testbed vm`` guest gets (``testbed doctor``'s
``acceleration`` line; issue 20).

Under software emulation (QEMU's TCG) every start-up is about 10-50x slower than under KVM (docs/vm.md), so
only tiny fabrics fit; a user reading a slow run needs to know which one the machine has.

- Inside a ``scripts/vm`` guest: ``TESTBED_VM_ACCEL`` (``kvm`` or ``tcg``, set by scripts/vm).
- Elsewhere: ``systemd-detect-virt`` (systemd's own probe: ``none`` on bare metal, ``kvm``, ``qemu`` for
  QEMU without KVM, ``microsoft``, ...), and what a ``testbed vm`` guest would get: scripts/vm's probe,
  cached per boot in :data:`VM_ACCEL_CACHE` (the kernel it probed, then ``kvm`` or ``tcg``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping, Optional

#: scripts/vm's cache of its KVM probe: line 1 the guest kernel, line 2 ``kvm`` or ``tcg``
VM_ACCEL_CACHE = Path("/run/testbed-vm-accel")
#: systemd-detect-virt's names of containers (not virtual machines)
CONTAINERS = {"docker", "podman", "lxc", "lxc-libvirt", "systemd-nspawn", "openvz", "rkt", "wsl", "proot", "pouch"}
#: what each acceleration means for a run (docs/vm.md)
MEANING = {
    "kvm": "KVM (hardware virtualization): full scenarios fit",
    "tcg": "software emulation (QEMU TCG): start-ups ~10-50x slower, only tiny fabrics (1-2 switches, "
           "2-4 hosts, 1-2 Mbit/s)",
}


def detect_virt() -> Optional[str]:
    """``systemd-detect-virt``'s answer (``none`` on bare metal), None where it is absent or times out."""
    if not shutil.which("systemd-detect-virt"):
        return None
    try:
        res = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True, timeout=5)
    except subprocess.TimeoutExpired:
        return None
    return res.stdout.strip() or None  # exit 1 with "none" on bare metal


def describe(env: Mapping[str, str], virt: Optional[str], vm_cache: Optional[str]) -> tuple[bool, str]:
    """(whether runs here are hardware-speed, one line for ``testbed doctor``) from the guest's
    ``TESTBED_VM_ACCEL`` in ``env``, ``virt`` (:func:`detect_virt`) and ``vm_cache`` (the text of
    :data:`VM_ACCEL_CACHE`, None when absent).

    >>> describe({"TESTBED_VM_ACCEL": "tcg"}, "qemu", None)[1][:52]
    'guest of testbed vm, software emulation (QEMU TCG): '
    """
    guest = env.get("TESTBED_VM_ACCEL")
    if guest in MEANING:
        return guest == "kvm", f"guest of testbed vm, {MEANING[guest]}"
    if virt is None:
        here, fast = "this machine: unknown (no systemd-detect-virt)", True
    elif virt == "none":
        here, fast = "this machine: bare metal", True
    elif virt == "qemu":
        here, fast = "this machine: a QEMU guest without KVM (software emulation): expect slow start-ups", False
    elif virt in CONTAINERS:
        here, fast = f"this machine: a {virt} container", True
    else:
        here, fast = f"this machine: a {virt} guest", True
    lines = (vm_cache or "").split()
    vm = lines[1] if len(lines) >= 2 and lines[1] in MEANING else None
    guests = (f"testbed vm guests: {MEANING[vm]} (probed for {lines[0]}; {VM_ACCEL_CACHE})" if vm else
              "testbed vm guests: not probed yet (scripts/vm probes KVM at its first boot)")
    return fast, f"{here}; {guests}"


def probe() -> tuple[bool, str]:
    """:func:`describe` of this machine."""
    try:
        cache = VM_ACCEL_CACHE.read_text()
    except OSError:
        cache = None
    return describe(os.environ, detect_virt(), cache)
