"""Flow-size distributions read from CDF files in the format of HPCC's traffic generator, and drawn from.

A file holds one point per line, ``size_bytes cdf_percent`` (two numbers separated by white space); the
percents run from 0 on the first line to 100 on the last and both columns increase strictly, as HPCC's
``CustomRand.testCdf`` requires (alibaba-edu/High-Precision-Congestion-Control, traffic_gen/custom_rand.py);
blank lines are skipped. Between points the CDF is linear, so a draw is the inverse CDF of a uniform percent
(``getValueFromPercentile``) and the mean is the trapezoid sum over the points (``getAvg``). The shipped files
(``websearch``, ``fbhdp``) are in cdfs/ with their sources (cdfs/README.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from testbed.spec.yaml_loader import ScenarioError

#: the shipped distributions: name -> file in cdfs/ (copied from HPCC's traffic_gen/, cdfs/README.md)
BUILTIN = {"websearch": "WebSearch_distribution.txt", "fbhdp": "FbHdp_distribution.txt"}
CDF_DIR = Path(__file__).resolve().parent / "cdfs"
#: largest CDF file read, bytes (HPCC's are under 200 bytes)
MAX_CDF_BYTES = 1 << 20


@dataclass(frozen=True)
class FlowSizeCdf:
    """A piecewise-linear flow-size CDF: ``sizes_bytes[i]`` has cumulative probability ``percents[i]`` (0-100);
    ``source``: the name or file it came from."""

    sizes_bytes: tuple[float, ...]
    percents: tuple[float, ...]
    source: str

    @property
    def mean_bytes(self) -> float:
        """Mean flow size of the distribution, bytes (the trapezoid sum, HPCC's getAvg)."""
        x, y = np.asarray(self.sizes_bytes), np.asarray(self.percents)
        return float(((x[1:] + x[:-1]) / 2 * np.diff(y)).sum() / 100)

    def quantile_bytes(self, percent) -> np.ndarray:
        """The size (bytes, unscaled) at cumulative ``percent`` (0-100; scalar or array): the inverse CDF."""
        return np.interp(percent, self.percents, self.sizes_bytes)

    def sample_bytes(self, rng: np.random.Generator, n: int, size_scale: float = 1.0) -> np.ndarray:
        """``n`` flow sizes (int64, bytes >= 1) drawn with ``rng``: the inverse CDF of uniform percents in
        [0, 100), times ``size_scale``, rounded, at least 1 byte (HPCC's traffic_gen makes a size <= 0 one
        byte)."""
        x = self.quantile_bytes(rng.random(n) * 100) * size_scale
        return np.maximum(np.rint(x), 1).astype(np.int64)


def parse_cdf(text: str, source: str, key: str) -> FlowSizeCdf:
    """The CDF in ``text`` (module docstring's format) read from ``source``. Raises ScenarioError naming
    ``key``, ``source`` and the line when a line is not two numbers, a size is negative, the columns do not
    increase strictly, or the percents do not run from 0 to 100."""
    sizes, percents = [], []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            x, y = float(parts[0]), float(parts[1])
            if not (math.isfinite(x) and math.isfinite(y)):
                raise ValueError
        except ValueError:
            raise ScenarioError(f"{key}: {source} line {no}: {line.strip()[:60]!r} is not 'size_bytes cdf_percent' "
                                "(two numbers)") from None
        if x < 0:
            raise ScenarioError(f"{key}: {source} line {no}: size {parts[0]} is negative")
        if sizes and (x <= sizes[-1] or y <= percents[-1]):
            raise ScenarioError(f"{key}: {source} line {no}: {line.strip()!r} does not increase on the line before "
                                f"({sizes[-1]:g} {percents[-1]:g}): sizes and percents must increase strictly")
        sizes.append(x)
        percents.append(y)
    if len(sizes) < 2:
        raise ScenarioError(f"{key}: {source} holds {len(sizes)} point(s): a CDF needs at least two lines "
                            "'size_bytes cdf_percent', from percent 0 to 100")
    if percents[0] != 0 or percents[-1] != 100:
        raise ScenarioError(f"{key}: {source}: the percents run from {percents[0]:g} to {percents[-1]:g}; a CDF file "
                            "runs from 0 (first line) to 100 (last line)")
    return FlowSizeCdf(tuple(sizes), tuple(percents), source)


def read_cdf(name_or_path: str, key: str = "workload.open_loop.cdf") -> FlowSizeCdf:
    """The CDF named ``name_or_path``: a shipped one (:data:`BUILTIN`) or a file. Raises ScenarioError naming
    ``key`` when the file is missing, unreadable, too large or malformed (:func:`parse_cdf`)."""
    path = CDF_DIR / BUILTIN[name_or_path] if name_or_path in BUILTIN else Path(name_or_path)
    source = name_or_path if name_or_path in BUILTIN else str(path)
    try:
        if path.stat().st_size > MAX_CDF_BYTES:
            raise ScenarioError(f"{key}: {source} is over {MAX_CDF_BYTES} bytes: a CDF file is a few dozen lines")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{key}: no such file {source!r}; allowed: {', '.join(BUILTIN)} or the path of a file "
                            "of lines 'size_bytes cdf_percent'") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{key}: cannot read {source!r}: {e}") from None
    return parse_cdf(text, source, key)
