"""Value types shared by the scenario sections: rates, sizes, `off`, counts, and the limits they are checked against.

Rates accept a number of bit/s (``10000000``) or a string with an SI suffix
(``"10M"``, ``"10Mbit"``, ``"1.5G"``); sizes accept bytes or ``"64KiB"``,
``"4MiB"``, ``"100KB"``.
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from typing_extensions import Annotated

#: per-link propagation delay: up to 1 s (netem's delay; larger delays need larger buffers than we allow)
from topology.model import MAX_LINK_DELAY_US  # noqa: F401  (re-exported: the spec's bound)

#: RoCE path MTUs allowed by the InfiniBand spec (IBTA vol. 1, 9.7.7 "PMTU").
ROCE_MTUS_BYTES = (256, 512, 1024, 2048, 4096)

_RATE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT]?)(?:bit|bps|b)?(?:/s)?\s*$")
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(|B|KB|KiB|MB|MiB|GB|GiB|K|M|G)\s*$")
_SI = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_SIZE_UNITS = {"": 1, "B": 1, "KB": 1000, "MB": 1000**2, "GB": 1000**3,
               "K": 1024, "M": 1024**2, "G": 1024**3,
               "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def parse_rate(v: Any) -> Any:
    """A rate string (``"10M"``, ``"10Mbit"``, ``"1.5G"``) -> bit/s (float); other values unchanged.
    ValueError when a string is not a rate."""
    if isinstance(v, str):
        m = _RATE_RE.match(v)
        if not m:
            raise ValueError(f"{v!r} is not a rate: use bit/s as a number or a string like '10M' or '10Mbit'")
        return float(m.group(1)) * _SI[m.group(2).lower()]
    return v


def parse_size(v: Any) -> Any:
    """A size string (``"64KiB"``, ``"100KB"``, ``"4MiB"``) -> bytes (int); other values unchanged.
    ValueError when a string is not a size."""
    if isinstance(v, str):
        m = _SIZE_RE.match(v)
        if not m:
            raise ValueError(f"{v!r} is not a size: use bytes as a number or a string like '64KiB', '4MiB'")
        return int(round(float(m.group(1)) * _SIZE_UNITS[m.group(2)]))
    return v


def off_refusing_zero(v: Any) -> Any:
    """``off`` (or YAML null) switches a limit off explicitly; 0 is refused (it would do so silently)."""
    if isinstance(v, str) and v.strip().lower() == "off":
        return None
    if not isinstance(v, bool) and isinstance(v, (int, float)) and v == 0:
        raise ValueError("0 is refused: it would silently mean 'no limit'; write off (or null) to switch "
                         "the limit off explicitly")
    return v


def refuse_bool(v: Any) -> Any:
    """``v`` unchanged; ValueError when it is a bool (YAML true/false would otherwise count as 1/0)."""
    if isinstance(v, bool):
        raise ValueError(f"{v!r} is a boolean, not a number")
    return v


def off_to_none(v: Any) -> Any:
    """``off`` (or YAML null) switches a limit off; every number keeps its meaning."""
    return None if isinstance(v, str) and v.strip().lower() == "off" else v


#: HTB shapes from 100 kbit/s (below, one 1500-byte frame takes over 0.1 s) to 100 Gbit/s
RateBps = Annotated[float, BeforeValidator(parse_rate), BeforeValidator(refuse_bool),
                    Field(ge=100e3, le=100e9, allow_inf_nan=False)]
#: a real link rate a scaled-down link stands for (up to 10 Tbit/s)
ReferenceBps = Annotated[float, BeforeValidator(parse_rate), BeforeValidator(refuse_bool),
                         Field(ge=100e3, le=10e12, allow_inf_nan=False)]
SizeBytes = Annotated[int, BeforeValidator(parse_size), BeforeValidator(refuse_bool), Field(gt=0)]
Count = Annotated[int, BeforeValidator(refuse_bool)]
#: largest scenario file read (a scenario is a few hundred bytes)
MAX_SCENARIO_BYTES = 1 << 20
#: smallest switch port buffer: one full Ethernet frame (1500 MTU + 14 header)
MIN_BUFFER_BYTES = 1514
#: largest switch port buffer: bfifo's limit is a __u32 byte count (struct tc_fifo_qopt)
MAX_BUFFER_BYTES = 2**32 - 1
#: link (IP) MTUs a fabric may use: Ethernet's 1500 up to the 9000 the userspace datapath carries
#: (docs/architecture.md: veths at 9000 and OVS mtu_request=9000 carry 8900-byte pings)
MIN_LINK_MTU_BYTES, MAX_LINK_MTU_BYTES = 1500, 9000
#: IPv4 (20) + UDP (8) + BTH (12) + ICRC (4): what a RoCEv2 packet adds to its payload inside the IP MTU
ROCEV2_IP_OVERHEAD_BYTES = 20 + 8 + 12 + 4


class SpecModel(BaseModel):
    """Base of every scenario section: frozen, unknown keys refused (the key's path in the message)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)
