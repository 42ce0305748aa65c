"""summary.json has one typed shape (testbed.results.shape.RunSummary) in every run, one JSON schema generated from
it (testbed.results.summary_schema) and docs/tables.md generated from the types (testbed.results.docs_tables).
Real runs (complete, Ctrl-C'd, refused) are checked against the schema in tests/integration/test_summary_shape_of_runs.py."""
from pathlib import Path

import jsonschema
import pytest

from testbed.results.congestion import CONGESTION_KEYS, stable_congestion
from testbed.results.docs_tables import markdown
from testbed.results.shape import (INCOMPLETE, STATUSES, SUMMARY_KEYS, TRANSPORT_KEYS, RunSummary, SummaryShapeError,
                                   stable_summary)
from testbed.results.summary_schema import json_schema

REPO = Path(__file__).resolve().parents[1]

#: the keys every assembler sets (testbed.pipeline.summary: write_results, write_partial, write_refused)
_RUN = {"run_id": "tb00a1", "run_dir": "/r/20261207T000000Z-s-tb00a1", "scenario": "s", "n_ranks": 2,
        "violations": [], "not_judged": [], "checks": {}, "fidelity": {}, "sizes": [],
        "congestion": stable_congestion(None), "host_link_bps": 10_000_000, "payload_efficiency": 0.93,
        "scale_factor": 10000.0, "percentile_method": "nearest_rank"}


def _partial(**kw) -> dict:
    return stable_summary({**_RUN, "status": "interrupted", "status_reason": "SIGINT during traffic after 1 of 3",
                           "complete": False, "incomplete_reason": "SIGINT during traffic after 1 of 3",
                           "interrupted": "SIGINT", "ops_done": 1, "ops_planned": 3, "verdict": INCOMPLETE,
                           "transport": {"loss_recovery": "go_back_n"}, **kw})


def test_the_schema_is_the_types_every_key_required_and_no_other():
    schema = json_schema()
    assert schema["required"] == list(SUMMARY_KEYS) and list(schema["properties"]) == list(SUMMARY_KEYS)
    assert schema["additionalProperties"] is False and schema["properties"]["status"]["enum"] == list(STATUSES)
    transport = schema["properties"]["transport"]
    assert transport["type"] == "object" and transport["required"] == list(TRANSPORT_KEYS)
    assert schema["properties"]["congestion"]["required"] == list(CONGESTION_KEYS)
    p = schema["properties"]
    assert p["fidelity"]["type"] == "object" and p["controller"]["type"] == ["object", "null"]
    assert p["n_ranks"]["type"] == "integer" and p["faithful"]["type"] == ["boolean", "null"]
    jsonschema.Draft202012Validator.check_schema(schema)


def test_a_partial_and_a_refused_summary_validate_and_have_the_same_keys():
    partial = _partial()
    refused = stable_summary({**_RUN, "status": "refused", "status_reason": "refused: no kernel datapath"})
    for s in (partial, refused):
        jsonschema.validate(s, json_schema())
        assert list(s) == list(SUMMARY_KEYS) and list(s["transport"]) == list(TRANSPORT_KEYS)
    assert partial["transport"]["loss_recovery"] == "go_back_n" and partial["transport"]["posted_bytes"] is None
    assert refused["verdict"] == INCOMPLETE and refused["complete"] is False and refused["controller"] is None
    assert refused["ops_done"] == 0 and refused["faults"] is None and refused["fidelity"] == {}
    # a script's chain works on both
    for s in (partial, refused):
        assert (s["fidelity"].get("cpu") or {}).get("saturated_by_core_s") is None


@pytest.mark.parametrize("bad, words", [
    ({"fidelity": "incomplete"}, "fidelity: dict expected, got str"),
    ({"transport": None, "zz_new": 3}, "unknown key(s) 'zz_new'"),
    ({"transport": {"extra_pkts": 1}}, "transport: unknown key(s) 'extra_pkts'"),
    ({"transport": {"posted_bytes": "8"}}, "transport.posted_bytes: int or null expected, got str"),
    ({"n_ranks": True}, "n_ranks: int expected, got bool"),
    ({"status": "done"}, "status: 'done'; allowed: complete, interrupted, failed, refused"),
])
def test_a_summary_of_another_shape_is_refused_naming_the_key(bad, words):
    with pytest.raises(SummaryShapeError) as e:
        _partial(**bad)
    assert words in str(e.value)


def test_a_required_key_missing_is_named():
    doc = {k: v for k, v in _RUN.items() if k != "sizes"}
    with pytest.raises(SummaryShapeError, match="missing key 'sizes'"):
        RunSummary.from_dict({**doc, "status": "complete"})


def test_the_schema_refuses_what_the_decoder_refuses():
    good = _partial()
    for key, value in (("fidelity", "incomplete"), ("transport", None), ("status", "done")):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**good, key: value}, json_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in good.items() if k != "jobs"}, json_schema())


def test_docs_tables_md_is_generated_from_the_schema_and_the_summary_types():
    text = markdown()
    assert (REPO / "docs" / "tables.md").read_text() == text, \
        "regenerate: .venv/bin/python -m testbed.results.docs_tables > docs/tables.md"
    for key in SUMMARY_KEYS:
        assert f"| `{key}` |" in text
    assert "| `status_reason` | string or null |" in text and "| `transport.posted_bytes` | integer or null |" in text
