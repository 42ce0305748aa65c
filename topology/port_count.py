"""How many ports a switch may have, and the refusal of a fabric whose switches need more.

Pure data (no third-party imports), as topology.model: the builders (spine_leaf, dual_plane, rail_optimized, dci)
raise :func:`too_many_ports`, and the scenario's ``fabric.ports_per_switch`` is bounded by
:data:`MAX_PORTS_PER_SWITCH` (testbed.spec.fabric).
"""
from __future__ import annotations

#: the most ports a switch may have (``fabric.ports_per_switch`` allows 2..254)
MAX_PORTS_PER_SWITCH = 254


def too_many_ports(what: str, needed: int, switch: str, ports_per_switch: int, fewer: str) -> ValueError:
    """The refusal of a ``switch`` (its role: "leaf") needing ``needed`` ports (``what``: the keys that make
    them) when ``fabric.ports_per_switch`` is ``ports_per_switch``: it names the value that would fit, or,
    above :data:`MAX_PORTS_PER_SWITCH`, says only ``fewer`` (e.g. "fewer hosts per leaf") fits."""
    fix = (f"set fabric.ports_per_switch: {needed} or more (allowed 2..{MAX_PORTS_PER_SWITCH}), or {fewer}"
           if needed <= MAX_PORTS_PER_SWITCH else
           f"fabric.ports_per_switch allows at most {MAX_PORTS_PER_SWITCH}: use {fewer}")
    return ValueError(f"{what} = {needed} ports per {switch}, more than fabric.ports_per_switch = "
                      f"{ports_per_switch}: {fix}")
