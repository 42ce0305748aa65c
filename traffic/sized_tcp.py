"""Sized TCP flows with a flow completion time: a sink and a sender run in the hosts' namespaces.

iperf3 cannot time a sized flow: with ``-n`` its client stops when the last byte is *written* into
the socket and the server stops counting when told so, while most of the flow still sits in the send
buffer (measured here: 506 KB "sent" in 14 ms, 33 KB counted by the server). So a sized background
flow (testbed.emulation.background) runs this instead:

- ``sink --bind IP --port P --streams K --out FILE``: accepts K connections, reads each to its end,
  then closes it (the sender's signal that every byte arrived); writes ``{"bytes": received}``;
- ``send --to IP --port P --bytes N --streams K --out FILE``: opens K connections, sends its share of
  N bytes on each (shares differ by at most one byte), half-closes them and waits until the sink
  closes each; writes ``{"bytes", "start_ns", "end_ns", "retransmits"}``: start before the first
  connect, end when the last connection closed, so end - start is the FCT (connection set-up
  included, as for an application); retransmits: the connections' ``tcpi_total_retrans``.

Both take ``--run-id`` (ignored) so that ``testbed clean`` can find a leftover of a killed run. Times
are Unix ns (traffic.clock.unix_ns). No imports beyond the standard library, for a quick start.
"""
from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time

CHUNK_BYTES = 65536
#: offset of ``tcpi_total_retrans`` (u32) in Linux's struct tcp_info: 8 bytes of u8 fields, then 23 u32 before it
TCPI_TOTAL_RETRANS_OFFSET = 8 + 23 * 4


def shares(total: int, k: int) -> list[int]:
    """``total`` split into ``k`` parts differing by at most one, larger first."""
    base, extra = divmod(total, k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def total_retrans(sock: socket.socket) -> int:
    """Segments the connection retransmitted (TCP_INFO ``tcpi_total_retrans``); 0 if unreadable."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCPI_TOTAL_RETRANS_OFFSET + 4)
        return struct.unpack_from("I", info, TCPI_TOTAL_RETRANS_OFFSET)[0]
    except (OSError, struct.error):
        return 0


def sink(bind: str, port: int, streams: int) -> dict:
    """Accept ``streams`` connections on bind:port, read each to EOF, close it; return bytes received."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind, port))
    srv.listen(streams)
    got = [0] * streams

    def read(i: int, conn: socket.socket) -> None:
        with conn:
            while True:
                b = conn.recv(CHUNK_BYTES)
                if not b:
                    return
                got[i] += len(b)

    threads = []
    for i in range(streams):
        conn, _ = srv.accept()
        t = threading.Thread(target=read, args=(i, conn), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    srv.close()
    return {"bytes": sum(got)}


def send(to: str, port: int, size_bytes: int, streams: int) -> dict:
    """Send ``size_bytes`` to to:port over ``streams`` connections; return bytes, start/end (Unix ns) and
    retransmits (module docstring)."""
    start_ns = time.time_ns()
    socks = [socket.create_connection((to, port), timeout=30) for _ in range(streams)]
    retrans = [0] * streams
    errors: list = []

    def one(i: int, s: socket.socket, n: int) -> None:
        try:
            buf = b"\0" * CHUNK_BYTES
            left = n
            while left:
                left -= s.send(buf[:min(left, CHUNK_BYTES)])
            s.shutdown(socket.SHUT_WR)
            s.settimeout(None)
            while s.recv(CHUNK_BYTES):  # the sink closes once it read everything
                pass
            retrans[i] = total_retrans(s)
        except OSError as e:
            errors.append(e)
        finally:
            s.close()

    threads = [threading.Thread(target=one, args=(i, s, n), daemon=True)
               for i, (s, n) in enumerate(zip(socks, shares(size_bytes, streams)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end_ns = time.time_ns()
    out = {"bytes": size_bytes, "start_ns": start_ns, "end_ns": end_ns, "retransmits": sum(retrans)}
    if errors:
        out["error"] = str(errors[0])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traffic.sized_tcp", description=__doc__.split("\n")[0])
    ap.add_argument("role", choices=("sink", "send"))
    ap.add_argument("--bind")
    ap.add_argument("--to")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--bytes", type=int, default=0)
    ap.add_argument("--streams", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--run-id", default="")
    a = ap.parse_args(argv)
    doc = sink(a.bind, a.port, a.streams) if a.role == "sink" else send(a.to, a.port, a.bytes, a.streams)
    with open(a.out, "w") as f:
        json.dump(doc, f)
    return 1 if "error" in doc else 0


if __name__ == "__main__":
    sys.exit(main())
