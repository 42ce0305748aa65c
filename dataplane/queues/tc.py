"""Traffic-control requests over netlink (pyroute2), shared by the queue backends.

:func:`request` sends one ``IPRoute.tc`` request and logs the kernel's
extended-ACK warnings: recent kernels (6.18 here) return warnings such as
HTB's ``quantum of class 10001 is big`` on the netlink reply instead of
dmesg, and pyroute2 0.9 does not decode them (:func:`extack_messages`). Open
the ``IPRoute`` with ``ext_ack=True`` to receive them.
"""
from __future__ import annotations

import errno
import logging
import struct

from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.rtnl import TC_H_ROOT

log = logging.getLogger(__name__)


_NLMSG_ERROR = 2
_NLM_F_CAPPED = 0x100
_NLM_F_ACK_TLVS = 0x200
_NLMSGERR_ATTR_MSG = 1


def ifindex(ipr, ifname: str) -> int:
    """Index of ``ifname`` in ``ipr``'s namespace; ValueError when it is not there."""
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise ValueError(f"interface {ifname!r} not found in this IPRoute's namespace")
    return found[0]


def clear_root(ipr, index: int) -> None:
    """Delete the egress root qdisc of interface ``index``; a fresh veth has none to delete."""
    try:
        ipr.tc("del", index=index, parent=TC_H_ROOT, handle=0)
    except NetlinkError as e:
        if e.code not in (errno.ENOENT, errno.EINVAL):
            raise


def extack_messages(responses) -> list[str]:
    """Texts of the kernel's extended-ACK messages (warnings) in pyroute2 replies.

    ``responses``: what an ``IPRoute(ext_ack=True)`` request returned (a list of
    messages). The TLVs are read from the raw reply (struct nlmsgerr followed by
    the request header when NLM_F_CAPPED, then NLMSGERR_ATTR_MSG; see
    include/uapi/linux/netlink.h) because pyroute2 0.9 misplaces them.
    Returns [] for sockets without ext_ack.
    """
    texts = []
    for msg in responses or ():
        hdr = msg.get("header", {}) if hasattr(msg, "get") else {}
        if hdr.get("type") != _NLMSG_ERROR or not hdr.get("flags", 0) & _NLM_F_ACK_TLVS:
            continue
        raw = bytes(msg.data[msg.offset:msg.offset + hdr["length"]])
        if hdr["flags"] & _NLM_F_CAPPED:
            off = 16 + 4 + 16
        else:
            off = 16 + 4 + struct.unpack_from("=I", raw, 20)[0]
        while off + 4 <= len(raw):
            alen, atype = struct.unpack_from("=HH", raw, off)
            if alen < 4:
                break
            if atype & 0x3FFF == _NLMSGERR_ATTR_MSG:
                texts.append(raw[off + 4:off + alen].split(b"\0", 1)[0].decode(errors="replace"))
            off += (alen + 3) & ~3
    return texts


def request(ipr, ifname: str, *args, **kwargs) -> None:
    """``ipr.tc(*args, **kwargs)``; each kernel warning is logged as ``<ifname>: kernel warning on tc <cmd>``."""
    for text in extack_messages(ipr.tc(*args, **kwargs)):
        log.warning("%s: kernel warning on tc %s: %s", ifname, args[0], text)


def ticks_to_bytes(ticks: int, rate_Bps: int) -> int:
    """A token bucket depth the kernel keeps in scheduler ticks, in bytes at ``rate_Bps`` bytes/s."""
    from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec

    return round(ticks / tick_in_usec * 1e-6 * rate_Bps)
