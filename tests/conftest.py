"""Suite-wide: scripts/test runs the unit tests on every core (pytest-xdist, ``--dist loadgroup``). A test
module that touches the kernel or Open vSwitch (namespaces, bridges, ``testbed clean``, a run's lock, OVS's
start) or binds real sockets (the transport's QPs on loopback addresses, UDP port 4791) checks or changes
state the whole machine shares, so its tests run on one worker, one after another (xdist group ``kernel``);
the others (pure logic) spread over the workers. The integration tests run apart, alone
(scripts/test's second part)."""
import re

import pytest

#: what a module's source says when it touches the machine's shared state
TOUCHES_KERNEL = re.compile(r"geteuid|ovs-vsctl|netns|NetNS|IPRoute|pyroute2|mnexec|Mininet|cleanup\.|"
                            r"[\"']clean[\"']|start-ovs|runlock|RunLock|fabric\.lock|"
                            r"Endpoint|endpoint|loopback|127\.0\.0|socket\.socket|4791")


def pytest_collection_modifyitems(config, items):
    touches: dict = {}
    for item in items:
        path = item.path
        if path not in touches:
            touches[path] = bool(TOUCHES_KERNEL.search(path.read_text(errors="replace")))
        if touches[path]:
            item.add_marker(pytest.mark.xdist_group("kernel"))
