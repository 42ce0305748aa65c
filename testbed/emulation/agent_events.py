"""The agents' events, read by one thread and handed to whoever waits for them.

The runner talks to every agent over its stdin/stdout (traffic.protocol). With
concurrent operations (several jobs, or a job's parallel groups, each on its own
stream) several threads wait at once: a job's thread for its op's ``OpDone`` from
the ranks of that op, the main thread for ``Ready`` or ``Stats`` from every agent.
:class:`AgentEvents` reads every agent's stdout in one thread and routes:

- an ``OpDone`` (or the ``FlowsDone`` of a pattern trial sent with an op id) to the
  pending op with its ``op_id`` (:meth:`expect_op`): the op's future completes when
  every rank it was sent to has answered (records in rank order);
- an ``ErrorEvent`` naming a pending op to that op's future; any other error (a QP's
  send error, a failed pattern trial) and an agent's death or an undecodable line fail
  every pending op and every later wait: the run is stopped by the caller;
- any other event to an inbox per event type, read by :meth:`collect`.

Raises (through futures and :meth:`collect`) :class:`testbed.emulation.agents.AgentError`'s
base, ``RuntimeError`` subclasses given as ``error_type``.
"""
from __future__ import annotations

import selectors
import threading
import time
from concurrent.futures import Future
from typing import Callable, Optional

from testbed.process.lifecycle import raise_if_interrupted
from traffic import protocol
from traffic.protocol import ErrorEvent, FlowsDone, OpDone

#: seconds between checks for Ctrl-C while a caller waits
WAIT_TICK_S = 0.2


class _PendingOp:
    def __init__(self, ranks: list[int]):
        self.ranks = set(ranks)
        self.got: dict[int, OpDone] = {}
        self.future: Future = Future()


class AgentEvents:
    """Route the events of agents ``procs`` (index i = rank i's process, stdout a pipe).

    ``describe_death(i) -> str``: the text for agent i's unexpected exit; ``error_type``: the
    exception class raised for failures (AgentError)."""

    def __init__(self, procs, describe_death: Callable[[int], str], error_type: type[Exception]):
        self.procs = procs
        self.describe_death = describe_death
        self.error_type = error_type
        self.lock = threading.Condition()
        self.pending: dict[int, _PendingOp] = {}
        self.inbox: dict[type, dict[int, object]] = {}
        self.error: Optional[str] = None
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="agent-events", daemon=True)
        self.thread.start()

    # -- reader thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        bufs: dict[int, bytes] = {}
        for i, p in enumerate(self.procs):
            sel.register(p.stdout, selectors.EVENT_READ, i)
        open_pipes = len(self.procs)
        try:
            while open_pipes:
                for key, _ in sel.select(WAIT_TICK_S):
                    i = key.data
                    f = key.fileobj
                    chunk = f.read1(65536) if hasattr(f, "read1") else f.read(65536)
                    if not chunk:
                        sel.unregister(f)
                        open_pipes -= 1
                        if not self.stopping:
                            self._fail(self.describe_death(i))
                        continue
                    bufs[i] = bufs.get(i, b"") + chunk
                    while b"\n" in bufs[i]:
                        line, bufs[i] = bufs[i].split(b"\n", 1)
                        self._route(i, line)
                if self.stopping and not open_pipes:
                    break
        except Exception as e:  # a closed pipe during stop, or a bug: fail waiters, never hang them
            if not self.stopping:
                self._fail(f"agent event reader failed: {e}")
        finally:
            sel.close()

    def _route(self, i: int, line: bytes) -> None:
        try:
            msg = protocol.decode(line)
        except protocol.ProtocolError as e:
            self._fail(f"rank {i}: {e}")
            return
        with self.lock:
            if isinstance(msg, ErrorEvent):
                err = msg.error if msg.error.startswith(f"rank {i}:") else f"rank {i}: {msg.error}"
                op = self.pending.pop(msg.op_id, None) if msg.op_id is not None else None
                if op is not None:
                    op.future.set_exception(self.error_type(err))
                    self.lock.notify_all()
                    return
            elif isinstance(msg, (OpDone, FlowsDone)) and msg.op_id in self.pending:
                op = self.pending[msg.op_id]
                op.got[i] = msg
                if set(op.got) >= op.ranks:
                    del self.pending[msg.op_id]
                    op.future.set_result([op.got[r] for r in sorted(op.got)])
                return
            else:
                self.inbox.setdefault(type(msg), {}).setdefault(i, msg)
                self.lock.notify_all()
                return
        self._fail(err)

    def _fail(self, text: str) -> None:
        with self.lock:
            if self.error is None:
                self.error = text
            for op in self.pending.values():
                op.future.set_exception(self.error_type(self.error))
            self.pending.clear()
            self.lock.notify_all()

    # -- callers ---------------------------------------------------------------------------------
    def expect_op(self, op_id: int, ranks: list[int]) -> Future:
        """Register op ``op_id`` sent to ``ranks`` (call before sending); its future gives their OpDone
        records in rank order. Raises ``error_type`` when an earlier failure stopped the agents, ValueError
        when ``op_id`` is pending already."""
        with self.lock:
            if self.error is not None:
                raise self.error_type(self.error)
            if op_id in self.pending:
                raise ValueError(f"op {op_id} is already running: op ids must be unique in a run")
            op = self.pending[op_id] = _PendingOp(ranks)
            return op.future

    def forget_op(self, op_id: int) -> None:
        """Drop a pending op (its command could not be sent)."""
        with self.lock:
            self.pending.pop(op_id, None)

    def collect(self, event: type, timeout_s: float) -> list:
        """One ``event`` from every agent, in rank order (consumed from the inbox).

        Raises ``error_type`` on a failure or after ``timeout_s`` naming the ranks that did not answer."""
        n = len(self.procs)
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while True:
                if self.error is not None:
                    raise self.error_type(self.error)
                box = self.inbox.get(event, {})
                if len(box) >= n:
                    self.inbox[event] = {}
                    return [box[i] for i in range(n)]
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(n)) - set(box))
                    raise self.error_type(f"no {event.__name__} from ranks {missing} within {timeout_s:.1f} s")
                self.lock.wait(min(left, WAIT_TICK_S))
                self.lock.release()
                try:
                    raise_if_interrupted()
                finally:
                    self.lock.acquire()

    def wait_op(self, future: Future, op_id: int, ranks: list[int], timeout_s: float) -> list:
        """The result of ``future`` (from :meth:`expect_op`), checking for Ctrl-C; raises ``error_type``
        naming the ranks that did not answer after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                with self.lock:
                    op = self.pending.pop(op_id, None)
                missing = sorted(set(ranks) - set(op.got)) if op is not None else sorted(ranks)
                raise self.error_type(f"no OpDone of op {op_id} from ranks {missing} within {timeout_s:.1f} s")
            raise_if_interrupted()
            try:
                return future.result(timeout=min(left, WAIT_TICK_S))
            except TimeoutError:
                continue

    def stop(self) -> None:
        """Stop routing: the agents are being told to exit (their EOF is no failure)."""
        self.stopping = True
