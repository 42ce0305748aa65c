"""Reader for the SimAI / AICB workload text format, and the collectives it implies.

Format (written by AICB ``workload_generator/SimAI_training_workload_generator.py``
``dump_file``; read by SimAI ``astra-sim-alibabacloud/astra-sim/workload/
Workload.cc`` ``initialize_workload``; samples in ``shared/workloads/simai``):

- line 1: parallelism policy, then ``key: value`` pairs: ``model_parallel_NPU_group``
  (TP size), ``ep``, ``pp``, ``vpp``, ``ga``, ``all_gpus``,
  ``checkpoints: N l1..lN``, ``checkpoint_initiates: N l1..lN``, ``pp_comm``
  (bytes; AICB may write it as ``8192.0``). Every key may be missing, as
  SimAI allows: its reader warns "Input workload format mismatch" when TP,
  ep, pp, vpp, ga or all_gpus is 0 (unset: Workload.hh declares them without
  an initializer) and runs on. A missing key takes :data:`TOLERATED_KEYS`
  (what AICB writes when its own argument is left at its default), listed
  in :attr:`SimaiHeader.absent`; a missing ``all_gpus`` stays None here and
  is resolved by the replay (testbed.workloads.simai.plan: ``workload.simai.all_gpus``,
  else the fabric's host count, as SimAI's groups take the topology's GPU
  count: ns-3 frontend ``AstraSimNetwork.cc`` passes ``{gpu_num}`` to
  ``Sys``, ``Sys::mock_nccl_grobal_group_init`` builds the groups from it).
- line 2: number of layer rows; the rows that follow must be exactly that
  many (AICB's L65B-M1-C05 declares 839 and holds 33: SimAI then reads past
  the end of the file; refused here naming line 2 and the last row's line).
- one row per layer, the 12 :data:`ROW_COLUMNS` (HYBRID_CUSTOMIZED rows have
  a 13th column, the row's own policy), separated by any whitespace: AICB
  joins columns with tabs (``"\t".join`` in ``dump_file``), its published
  files also hold runs of spaces and leading spaces, and SimAI reads tokens
  with ``>>`` (any whitespace).
- numbers are read as exact integers (Python ints, never floats): a row's
  times and sizes up to 2**64 - 1 (SimAI reads them as ``uint64_t``), header
  values and the row count up to 2**31 - 1 (``std::stoi``); larger values are
  refused naming file, line and column.

How SimAI runs a file, and what :func:`collective_ops` copies (Workload.cc,
``iterate_hybrid_parallel_Transformer[_fwd_in_bckwd]``, Layer.cc):

- order: forward pass over rows 0..N-1 (fwd compute, then fwd collective,
  blocking); then backward over rows N-1..0, each row input-gradient compute +
  ig collective (blocking), then weight-gradient compute + wg collective
  (non-blocking, FIFO; the next forward pass of that layer waits for it).
  DATA policy (``iterate_data_parallel``): forward compute only, backward
  issues only wg collectives, wg before ig for each row.
- group scope from the collective's name (Workload.cc, the ``*_group_type``
  branches): a plain name is the TP group in the fwd and ig phases and the DP
  group in the wg phase; suffix ``_EP`` = EP group, ``_DP_EP`` = DP-within-EP.
  Which ranks form each group: :mod:`traffic.workloads.parallel_groups`.
- ``ga``: AICB already unrolls gradient accumulation into the rows (its
  generator loops ``ga_num`` times), so rows are not repeated.
- after each collective completes SimAI waits the row's weight-update time
  (Layer.cc: ``fwd_update_time = input_grad_update_time = weight_grad_update_time``).
- checkpoints / fwd-in-backward recomputation are not replayed: SimAI parses
  ``checkpoint_initiates`` into the checkpoint map, never into
  ``need_checkpoint_initiation``, so it never recomputes either.
- time unit: SimAI reads compute times as Ticks and its ns-3 backend runs 1
  Tick = 1 ns (``sim_get_time`` returns ``GetNanoSeconds()``; reports divide
  by FREQ = 1000 to print us). The files do not say; the unit is a setting.

- BROADCAST: AICB writes it (its Megatron ``norm`` row: the forward
  ``broadcast_data`` of 8 x micro_batch x seq_length bytes of token ids over
  the TP group; ``generate_megatron_workload.py`` and the DeepSpeed
  generators log ``CommType.broadcast`` with ``msg_size`` = the root's
  buffer, the bytes every other rank receives). SimAI's reader has no branch
  for it (Workload.cc ``initialize_workload`` tests ALLREDUCE, ALLTOALL,
  ALLREDUCEALLTOALL, ALLGATHER, REDUCESCATTER prefixes only), so the phase's
  ComType stays ``None`` and SimAI skips it. Here it runs as the broadcast it
  is, its size the root's buffer (:data:`SIMAI_SKIPS` lists what SimAI skips;
  the replay notes it). Group scope as for any collective (plain: TP in fwd
  and ig, DP in wg; ``_EP``, ``_DP_EP`` suffixes).

Known divergences: SimAI matches ``ALLREDUCEALLTOALL`` as ALLREDUCE first
(``substr(0, 9)``); here it is its own collective. BROADCAST runs here and
SimAI skips it (above). For MICRO files SimAI
issues only row 0 (``iterate_micro_benchmark`` never advances ``index``);
here every row's wg collective is issued in file order (a size sweep).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Iterable, List, Optional, Tuple, Union

#: Parallelism policies SimAI knows (Workload.cc ``decode_parallelsim``).
POLICIES = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER", "DATA", "MODEL",
            "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_DLRM",
            "HYBRID_DLRM_ENHANCED", "HYBRID_CUSTOMIZED", "MICRO", "DISTRIBUTED_INFERENCE")
_TRANSFORMER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_TRANSFORMER")
#: Policies :func:`collective_ops` can order.
OPS_POLICIES = _TRANSFORMER + ("DATA", "MICRO")

BASE_COLLECTIVES = ("ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL",
                    "ALLREDUCEALLTOALL", "BROADCAST")
#: Base collectives SimAI's reader matches to no ComType and so skips (module docstring)
SIMAI_SKIPS = ("BROADCAST",)
_SUFFIX_GROUP = {"_EP": "EP", "_DP_EP": "DP_EP"}
#: Every collective token a row may hold.
COLLECTIVES = ("NONE",) + tuple(b + s for b in BASE_COLLECTIVES for s in ("", "_EP", "_DP_EP"))

ROW_COLUMNS = ("layer_name", "layer_id",
               "fwd_compute_ticks", "fwd_collective", "fwd_size_bytes",
               "ig_compute_ticks", "ig_collective", "ig_size_bytes",
               "wg_compute_ticks", "wg_collective", "wg_size_bytes",
               "wg_update_ticks")

#: Header keys (without the colon) -> SimaiHeader field.
HEADER_KEYS = {"model_parallel_NPU_group": "tp_size", "ep": "ep_size",
               "expert_parallel_npu_group": "ep_size", "pp": "pp_size", "vpp": "vpp",
               "ga": "ga", "all_gpus": "all_gpus", "checkpoints": "checkpoints",
               "checkpoint_initiates": "checkpoint_initiates", "pp_comm": "pp_comm_bytes",
               "DLRM_LAST_BOTTOM_LAYER": "dlrm_last_bottom_layer"}
#: Header keys SimAI tolerates missing (it warns "Input workload format mismatch") -> the value taken here:
#: AICB's default (``tensor_model_parallel_size``, ``expert_model_parallel_size``, ``pipeline_model_parallel``
#: 1; ga 1 = no accumulation; vpp 1 = no interleaving). ``all_gpus`` is resolved by the replay (docstring).
TOLERATED_KEYS = {"model_parallel_NPU_group": 1, "ep": 1, "pp": 1, "vpp": 1, "ga": 1}

#: time_unit -> nanoseconds per unit (integers: compute times convert exactly)
TIME_UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
#: largest time or size a row may hold: SimAI reads them as uint64_t (Tick, comm size)
MAX_ROW_VALUE = 2**64 - 1
#: largest header number: SimAI reads header values with std::stoi (int)
MAX_HEADER_VALUE = 2**31 - 1
#: largest workload file read
MAX_FILE_BYTES = 64 * 1024 * 1024
PHASES = ("fwd", "ig", "wg")


class SimaiFormatError(ValueError):
    """A malformed SimAI workload file; the message names file, line, column and value.

    Attributes: path, line (1-based, 0 = whole file), column (name or None), value.
    """

    def __init__(self, path: str, line: int, column: Optional[str], value: object,
                 problem: str):
        self.path, self.line, self.column, self.value = path, line, column, value
        where = f"{path}:{line}" if line else path
        col = f" column {column!r}" if column else ""
        val = f" value {value!r}" if value is not None else ""
        super().__init__(f"{where}:{col}{val}: {problem}" if col or val else f"{where}: {problem}")


@dataclass(frozen=True)
class SimaiHeader:
    """Line 1. Sizes are GPU counts; pp_comm_bytes the pipeline send/recv size.

    absent: the header keys SimAI tolerates missing that this file does not give, in the order of
    :data:`TOLERATED_KEYS` then ``all_gpus`` (transformer policies; other policies, whose keys SimAI
    does not read: ``all_gpus`` only); each took its :data:`TOLERATED_KEYS` value, all_gpus stays None.
    """

    policy: str
    tp_size: int = 1
    ep_size: int = 1
    pp_size: int = 1
    vpp: int = 1
    ga: int = 1
    all_gpus: Optional[int] = None
    checkpoints: Tuple[int, ...] = ()
    checkpoint_initiates: Tuple[int, ...] = ()
    pp_comm_bytes: int = 0
    dlrm_last_bottom_layer: Optional[int] = None
    absent: Tuple[str, ...] = ()


@dataclass(frozen=True)
class SimaiRow:
    """One layer row. ``*_ticks`` are in the file's unstated time unit (SimAI: ns)."""

    line: int
    layer_name: str
    layer_id: int
    fwd_compute_ticks: int
    fwd_collective: str
    fwd_size_bytes: int
    ig_compute_ticks: int
    ig_collective: str
    ig_size_bytes: int
    wg_compute_ticks: int
    wg_collective: str
    wg_size_bytes: int
    wg_update_ticks: int
    row_policy: Optional[str] = None     # HYBRID_CUSTOMIZED only


@dataclass(frozen=True)
class SimaiWorkload:
    """A parsed file: its path, header and rows in file order."""

    path: str
    header: SimaiHeader
    rows: Tuple[SimaiRow, ...]


@dataclass(frozen=True)
class CollectiveOp:
    """One collective to replay, in execution order.

    index: position in the op list; layer: layer name; layer_index: row
    (0-based); line: the row's line in the file (1-based); phase: 'fwd', 'ig'
    or 'wg'; collective: base name (:data:`BASE_COLLECTIVES`); group: 'TP',
    'DP', 'EP' or 'DP_EP' (ranks: :mod:`traffic.workloads.parallel_groups`); size_bytes:
    scaled size (0 stays 0, else >= 1); compute_time_ns: compute to run before
    issuing it, since the previous op (includes the compute of phases in
    between that issue no selected collective); update_time_ns: wait after it
    completes; both exact integers (file ticks x ns per time unit); blocking:
    whether SimAI waits for it before the next phase (fwd and ig yes, wg no).
    """

    index: int
    layer: str
    layer_index: int
    line: int
    phase: str
    collective: str
    group: str
    size_bytes: int
    compute_time_ns: int
    update_time_ns: int
    blocking: bool


# --- parsing -------------------------------------------------------------------

def _int(path: str, line: int, column: str, token: str, lo: Optional[int] = 0,
         what: str = "a non-negative integer", hi: int = MAX_ROW_VALUE) -> int:
    """The exact integer of a decimal token (Python int: no float rounding), lo <= value <= hi."""
    digits = token[1:] if token.startswith("-") else token
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 40:
        raise SimaiFormatError(path, line, column, token[:48], f"is not {what}")
    value = int(token)
    if lo is not None and value < lo:
        raise SimaiFormatError(path, line, column, token, f"is not {what}")
    if value > hi:
        raise SimaiFormatError(path, line, column, token,
                               f"is larger than {hi}, the largest value SimAI reads here")
    return value


def _parse_header(path: str, text: str) -> SimaiHeader:
    tokens = text.split()
    if not tokens:
        raise SimaiFormatError(path, 1, "policy", "", "line 1 is empty: expected a "
                               f"parallelism policy, one of {', '.join(POLICIES)}")
    policy = tokens[0]
    if policy not in POLICIES:
        raise SimaiFormatError(path, 1, "policy", policy,
                               f"unknown parallelism policy; allowed: {', '.join(POLICIES)}")
    fields: dict = {}
    seen = set()
    i = 1
    while i < len(tokens):
        key = tokens[i].rstrip(":")
        if key not in HEADER_KEYS:
            raise SimaiFormatError(path, 1, "header key", tokens[i], "unknown key; allowed: "
                                   + ", ".join(k + ":" for k in HEADER_KEYS))
        if key in seen:
            raise SimaiFormatError(path, 1, key, tokens[i], "key given twice")
        seen.add(key)
        if i + 1 >= len(tokens):
            raise SimaiFormatError(path, 1, key, None, "has no value")
        field = HEADER_KEYS[key]
        if key in ("checkpoints", "checkpoint_initiates"):
            n = _int(path, 1, key, tokens[i + 1], what="a layer count (non-negative integer)",
                     hi=MAX_HEADER_VALUE)
            layers = []
            for t in tokens[i + 2:i + 2 + n]:
                if t.rstrip(":") in HEADER_KEYS:
                    break                      # the next key: the list is short
                layers.append(t)
            if len(layers) < n:
                raise SimaiFormatError(path, 1, key, tokens[i + 1],
                                       f"announces {n} layer numbers, {len(layers)} follow")
            fields[field] = tuple(_int(path, 1, key, t, what="a layer number (integer >= 0)",
                                       hi=MAX_HEADER_VALUE) for t in layers)
            i += 2 + n
            continue
        token = tokens[i + 1]
        if key == "pp_comm":        # AICB writes a float after division by TP
            try:
                value = float(token)
            except ValueError:
                value = -1.0
            if not (math.isfinite(value) and value >= 0 and value.is_integer()):
                raise SimaiFormatError(path, 1, key, token[:48],
                                       "is not a whole non-negative number of bytes")
            if value > MAX_ROW_VALUE:
                raise SimaiFormatError(path, 1, key, token, f"is larger than {MAX_ROW_VALUE}, "
                                       "the largest value SimAI reads here")
            # exact for integer tokens; a float token is exact up to 2**53
            fields[field] = int(token) if token.isdigit() else int(value)
        elif key == "DLRM_LAST_BOTTOM_LAYER":
            fields[field] = _int(path, 1, key, token, what="a layer number (integer >= 0)",
                                 hi=MAX_HEADER_VALUE)
        else:
            fields[field] = _int(path, 1, key, token, lo=1, what="a positive integer",
                                 hi=MAX_HEADER_VALUE)
        i += 2
    if "expert_parallel_npu_group" in seen:     # AICB's multi-all-reduce header spells ep so
        seen.add("ep")
    absent = [k for k in TOLERATED_KEYS if k not in seen] if policy in _TRANSFORMER else []
    absent += [] if "all_gpus" in seen else ["all_gpus"]
    h = SimaiHeader(policy=policy, absent=tuple(absent), **fields)
    if h.all_gpus is not None and h.all_gpus % (h.tp_size * h.pp_size):
        raise SimaiFormatError(path, 1, "all_gpus", h.all_gpus,
                               f"is not a multiple of model_parallel_NPU_group x pp = "
                               f"{h.tp_size} x {h.pp_size}")
    return h


def _parse_row(path: str, line: int, text: str, policy: str) -> SimaiRow:
    tokens = text.split()
    ncols = len(ROW_COLUMNS) + (policy == "HYBRID_CUSTOMIZED")
    if len(tokens) != ncols:
        raise SimaiFormatError(
            path, line, None, None,
            f"{len(tokens)} columns, expected {ncols} ({', '.join(ROW_COLUMNS)}"
            + (", row_policy)" if ncols > len(ROW_COLUMNS) else ")"))
    values: dict = {"line": line, "layer_name": tokens[0],
                    "layer_id": _int(path, line, "layer_id", tokens[1], lo=-2**31,
                                     what="an integer (int32)", hi=MAX_HEADER_VALUE)}
    for col, tok in zip(ROW_COLUMNS[2:], tokens[2:]):
        if col.endswith("_collective"):
            if tok not in COLLECTIVES:
                raise SimaiFormatError(path, line, col, tok, "unknown collective; allowed: "
                                       + ", ".join(COLLECTIVES))
            values[col] = tok
        elif col.endswith("_bytes"):
            values[col] = _int(path, line, col, tok, what="a non-negative integer byte count")
        else:
            values[col] = _int(path, line, col, tok,
                               what="a non-negative integer time in ticks")
    if ncols > len(ROW_COLUMNS):
        if tokens[-1] not in POLICIES:
            raise SimaiFormatError(path, line, "row_policy", tokens[-1],
                                   f"unknown parallelism policy; allowed: {', '.join(POLICIES)}")
        values["row_policy"] = tokens[-1]
    return SimaiRow(**values)


def parse_simai(text: str, path: str = "<string>") -> SimaiWorkload:
    """Parse the text of a workload file; ``path`` is used in error messages only.

    Raises :class:`SimaiFormatError` (a ValueError) naming path, line, column,
    the bad value and what is allowed.
    """
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise SimaiFormatError(path, 1, "policy", "", "line 1 is empty: expected a "
                               f"parallelism policy, one of {', '.join(POLICIES)}")
    header = _parse_header(path, lines[0])
    if len(lines) < 2:
        raise SimaiFormatError(path, 2, "row_count", None,
                               "missing: line 2 must hold the number of layer rows")
    n_rows = _int(path, 2, "row_count", lines[1].strip(),
                  what="a non-negative integer (the number of layer rows)", hi=MAX_HEADER_VALUE)
    rows: List[SimaiRow] = []
    for lineno, text_line in enumerate(lines[2:], start=3):
        if not text_line.strip():
            continue              # SimAI reads with >>, which skips blank lines
        if len(rows) == n_rows:
            raise SimaiFormatError(path, lineno, None, None,
                                   f"more rows than the {n_rows} declared on line 2")
        rows.append(_parse_row(path, lineno, text_line, header.policy))
    if len(rows) != n_rows:
        last = f"; the last row read is line {rows[-1].line}" if rows else ""
        raise SimaiFormatError(path, 2, "row_count", n_rows,
                               f"line 2 declares {n_rows} rows, the file holds {len(rows)}{last}: a file "
                               "cut short or a wrong count (SimAI would read past its end)")
    return SimaiWorkload(path=path, header=header, rows=tuple(rows))


def load_simai(path: Union[str, Path]) -> SimaiWorkload:
    """Read and parse a SimAI/AICB workload file.

    Raises OSError when it cannot be read, :class:`SimaiFormatError` (a
    ValueError naming file, line, column, value and what is allowed) when it
    is malformed, larger than :data:`MAX_FILE_BYTES` or not UTF-8 text.
    """
    from traffic.workloads.files import read_bounded

    p = str(path)
    data = read_bounded(p, MAX_FILE_BYTES)  # UnreadableFile (an OSError) for what never ends, e.g. /proc/kmsg
    if len(data) > MAX_FILE_BYTES:
        raise SimaiFormatError(p, 0, None, None, f"larger than {MAX_FILE_BYTES} bytes, the most read "
                               "(a workload file of thousands of layers is well below)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SimaiFormatError(p, 0, None, None, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    return parse_simai(text, p)


# --- execution order -----------------------------------------------------------------

def _group(phase: str, token: str) -> Tuple[str, str]:
    """(base collective, group) of a token for a phase (Workload.cc group_type branches)."""
    for suffix, group in _SUFFIX_GROUP.items():
        if token.endswith(suffix) and token[:-len(suffix)] in BASE_COLLECTIVES:
            return token[:-len(suffix)], group
    return token, ("DP" if phase == "wg" else "TP")


def _phases(workload: SimaiWorkload) -> Iterable[Tuple[int, str, bool, bool]]:
    """(row index, phase, issues its collective, blocking) in SimAI's execution order."""
    policy, n = workload.header.policy, len(workload.rows)
    if policy in _TRANSFORMER:
        for i in range(n):
            yield i, "fwd", True, True
        for i in reversed(range(n)):
            yield i, "ig", True, True
            yield i, "wg", True, False
    elif policy == "DATA":
        for i in range(n):
            yield i, "fwd", False, True
        for i in reversed(range(n)):
            yield i, "wg", True, False
            if i:
                yield i, "ig", False, True
    elif policy == "MICRO":
        for i in range(n):
            yield i, "wg", True, False
    else:
        raise ValueError(f"{workload.path}: policy {policy!r} is not supported by "
                         f"collective_ops; supported: {', '.join(OPS_POLICIES)}")


def iteration_compute_ns(workload: SimaiWorkload, time_unit: str = "ns") -> int:
    """Compute time of one iteration in ns: every phase's compute in SimAI's order (exact integer).

    Raises ValueError for an unknown time unit or an unsupported policy (as :func:`collective_ops`).
    """
    if time_unit not in TIME_UNITS_NS:
        raise ValueError(f"time_unit {time_unit!r} not allowed: one of {', '.join(TIME_UNITS_NS)}")
    return TIME_UNITS_NS[time_unit] * sum(getattr(workload.rows[i], f"{phase}_compute_ticks")
                                          for i, phase, _, _ in _phases(workload))


def collective_ops(workload: SimaiWorkload, collectives: Optional[Iterable[str]] = ("ALLREDUCE",),
                   size_scale: float = 1.0, time_unit: str = "ns") -> List[CollectiveOp]:
    """The collectives of one training iteration, in SimAI's execution order.

    collectives: names to keep, base names (``ALLREDUCE``: any group) or full
    tokens (``ALLTOALL_EP``); None = all. size_scale > 0 multiplies every size
    (time dilation), exactly (the decimal value of size_scale, as a fraction):
    a scaled size is rounded to the nearest byte (ties to even), at least 1
    unless the file says 0. time_unit: unit of the file's compute times, one
    of :data:`TIME_UNITS_NS` (SimAI itself uses ns, see the module docstring).
    Order and group scopes: module docstring. Policies: :data:`OPS_POLICIES`.
    Raises ValueError for an unknown collective name or time unit, a
    size_scale <= 0, or an unsupported policy.
    """
    if time_unit not in TIME_UNITS_NS:
        raise ValueError(f"time_unit {time_unit!r} not allowed: one of "
                         f"{', '.join(TIME_UNITS_NS)}")
    if isinstance(size_scale, bool) or not (isinstance(size_scale, (int, float, Fraction))
                                            and size_scale > 0 and math.isfinite(size_scale)):
        raise ValueError(f"size_scale {size_scale!r} not allowed: must be > 0")
    scale = Fraction(repr(size_scale)) if isinstance(size_scale, float) else Fraction(size_scale)
    keep = None
    if collectives is not None:
        keep = set(collectives)
        allowed = set(COLLECTIVES) - {"NONE"}
        bad = sorted(keep - allowed)
        if bad:
            raise ValueError(f"collectives {bad} unknown: allowed {', '.join(sorted(allowed))}")
    ns = TIME_UNITS_NS[time_unit]
    ops: List[CollectiveOp] = []
    pending_ticks = 0
    for i, phase, issues, blocking in _phases(workload):
        row = workload.rows[i]
        pending_ticks += getattr(row, f"{phase}_compute_ticks")
        token = getattr(row, f"{phase}_collective")
        if not issues or token == "NONE":
            continue
        base, group = _group(phase, token)
        if keep is not None and base not in keep and token not in keep:
            continue
        size = getattr(row, f"{phase}_size_bytes")
        scaled = max(1, round(size * scale)) if size else 0
        ops.append(CollectiveOp(index=len(ops), layer=row.layer_name, layer_index=i, line=row.line,
                                phase=phase, collective=base, group=group,
                                size_bytes=scaled, compute_time_ns=pending_ticks * ns,
                                update_time_ns=row.wg_update_ticks * ns, blocking=blocking))
        pending_ticks = 0
    return ops
