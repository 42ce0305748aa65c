"""docs/tables.md, generated: the run directory's tables (testbed.results.schema.TABLES) and summary.json's keys
(testbed.results.shape.RunSummary, testbed.results.summary_schema). ``python -m testbed.results.docs_tables >
docs/tables.md`` writes it; tests/test_rundir.py keeps the committed file equal to :func:`markdown`."""
from __future__ import annotations

from testbed.results.schema import TABLES
from testbed.results.shape import STATUSES
from testbed.results.summary_schema import summary_rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def tables_markdown() -> list[str]:
    """The tables' sections: one per table, its columns with type, unit and description."""
    lines = []
    for t in TABLES.values():
        lines += [f"## {t.name}", "", f"{t.description}. Written by: {t.written}.", "",
                  "| column | type | description |", "|---|---|---|"]
        for c in t.columns:
            extra = f" (only in {c.when})" if c.optional else ""
            lines.append(f"| `{c.name}` | {c.dtype} | {c.description}{extra} |")
        lines.append("")
    return lines


def summary_markdown() -> list[str]:
    """summary.json's section: every key with its JSON type and description, in file order."""
    lines = ["## summary.json", "",
             "Every run writes the same keys, in this order, each with one JSON type (`testbed.results.shape."
             "RunSummary`; `testbed.results.summary_schema.json_schema()` is the JSON schema): a complete run, a "
             "run cut short (`status` " + ", ".join(f"`{s}`" for s in STATUSES[1:3]) + ") and a run refused after "
             "it got its run id (`status` `refused`: the controller framework, the datapath, the ECN marker or "
             "the link delay asked for is missing here, or Open vSwitch is unusable; a scenario refused before, "
             "exit code 2 with nothing built, writes no run directory). A block the run did not reach or did not "
             "have is `null`; `transport` is always an object with every key below (`null`: not measured); "
             "`fidelity` and `checks` are `{}` when nothing was judged; `congestion` always has every key of "
             "`testbed.results.congestion.CONGESTION_KEYS`.", "",
             "| key | type | description |", "|---|---|---|"]
    lines += [f"| `{key}` | {kind} | {_cell(text)} |" for key, kind, text in summary_rows()]
    return lines + [""]


def markdown() -> str:
    """docs/tables.md's content."""
    lines = ["# Tables of a run directory", "",
             "Generated from `testbed/results/schema.py` and `testbed/results/shape.py` "
             "(`python -m testbed.results.docs_tables > docs/tables.md`); "
             "do not edit by hand. Every table is written as `NAME.csv` and `NAME.parquet`; "
             "`testbed.results.rundir.RunDir` reads them (Parquet first) and checks the columns below. "
             "Every `*_ns` time is Unix-epoch nanoseconds. `<N>` stands for 0, 1, ... (one column each).", ""]
    return "\n".join(lines + tables_markdown() + summary_markdown())


if __name__ == "__main__":
    print(markdown(), end="")
