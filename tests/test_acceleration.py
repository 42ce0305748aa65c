"""testbed doctor's acceleration line (testbed.host.acceleration): a guest's, a machine's, and what testbed vm
guests get."""
import pytest

from testbed.host import acceleration
from testbed.host.acceleration import describe


@pytest.mark.parametrize("accel, fast, words", [
    ("tcg", False, "guest of testbed vm, software emulation (QEMU TCG): start-ups ~10-50x slower"),
    ("kvm", True, "guest of testbed vm, KVM (hardware virtualization)"),
])
def test_a_guest_names_the_acceleration_scripts_vm_gave_it(accel, fast, words):
    got = describe({"TESTBED_VM_ACCEL": accel}, "qemu", "6.1.0-57-amd64\ntcg\n")
    assert got[0] is fast and got[1].startswith(words)


@pytest.mark.parametrize("virt, fast, here", [
    ("none", True, "this machine: bare metal"),
    ("kvm", True, "this machine: a kvm guest"),
    ("docker", True, "this machine: a docker container"),
    ("qemu", False, "this machine: a QEMU guest without KVM (software emulation): expect slow start-ups"),
    (None, True, "this machine: unknown (no systemd-detect-virt)"),
])
def test_a_machine_names_its_virtualization_and_what_vm_guests_get(virt, fast, here):
    ok, line = describe({}, virt, "6.1.0-57-amd64\ntcg\n")
    assert ok is fast and line.startswith(here + "; ")
    assert line.endswith("testbed vm guests: software emulation (QEMU TCG): start-ups ~10-50x slower, only tiny "
                         "fabrics (1-2 switches, 2-4 hosts, 1-2 Mbit/s) (probed for 6.1.0-57-amd64; "
                         "/run/testbed-vm-accel)")


@pytest.mark.parametrize("cache", [None, "", "6.1.0-57-amd64\n", "6.1.0-57-amd64\nwarp\n"])
def test_without_a_usable_probe_cache_vm_guests_are_not_probed_yet(cache):
    assert describe({}, "kvm", cache)[1].endswith("testbed vm guests: not probed yet (scripts/vm probes KVM at its "
                                                   "first boot)")


def test_the_probe_reads_this_machine(monkeypatch, tmp_path):
    cache = tmp_path / "accel"
    cache.write_text("6.1.0-57-amd64\nkvm\n")
    monkeypatch.setattr(acceleration, "VM_ACCEL_CACHE", cache)
    monkeypatch.delenv("TESTBED_VM_ACCEL", raising=False)
    ok, line = acceleration.probe()
    assert "testbed vm guests: KVM (hardware virtualization)" in line
    virt = acceleration.detect_virt()
    assert virt is None or line.startswith("this machine: ")
