"""summary.json's ``congestion`` block has one shape in every run (seen: null without ECN/PFC, so a script's
``summary["congestion"].get(...)`` crashed): ``enabled`` and every figure, None where not measured."""
import json

from controllers.contract import LOOP_RESULT_FILE
from testbed.results.congestion import CONGESTION_KEYS, congestion_block, stable_congestion
from testbed.results.printing import print_blocks

ECN_LOOP = {"loop_p50_ms": 0.8, "loop_p99_ms": 1.045, "loop_max_ms": 2.0, "ticks": 5000, "missed_ticks": 3,
            "lossless_drops_pkts": 0, "lossless_queue_p99_bytes": 41000, "lossless_queue_max_bytes": 52000,
            "ecn": {"marker": "red", "kmin_bytes": 20000, "kmax_bytes": 60000, "pmax": 0.2, "ect_pkts": 9000,
                    "ce_marked_pkts": 389}}


def test_a_run_without_the_loop_has_every_key_none_and_enabled_false():
    block = stable_congestion(None)
    assert tuple(block) == CONGESTION_KEYS and len(CONGESTION_KEYS) == len(set(CONGESTION_KEYS))
    assert block["enabled"] is False and all(v is None for k, v in block.items() if k != "enabled")
    assert block.get("pfc") is None and (block.get("pfc") or {}).get("xoff_bytes") is None  # a script's chain


def test_a_run_with_ecn_has_the_same_keys_its_figures_and_none_for_pfc(tmp_path):
    (tmp_path / LOOP_RESULT_FILE).write_text(json.dumps(ECN_LOOP))
    raw = congestion_block(tmp_path)
    block = stable_congestion({**raw, "rest_goodput_during_bps": 7.5e6})  # a storm's window figure: kept
    assert list(block)[:len(CONGESTION_KEYS)] == list(CONGESTION_KEYS)
    assert list(block)[len(CONGESTION_KEYS):] == ["rest_goodput_during_bps"]
    assert block["enabled"] is True and block["ce_marked_pkts"] == 389 and block["kmax_bytes"] == 60000
    assert block["ecn_loop_p99_ms"] == 1.045 and block["pause_frames"] is None and block["pfc"] is None
    assert {k: v for k, v in block.items() if v is not None} == {"enabled": True, **raw,
                                                                "rest_goodput_during_bps": 7.5e6}


def test_the_printed_line_is_the_measured_figures_and_none_without_the_loop(tmp_path, capsys):
    print_blocks({"congestion": stable_congestion(None)})
    assert capsys.readouterr().out == ""
    (tmp_path / LOOP_RESULT_FILE).write_text(json.dumps(ECN_LOOP))
    print_blocks({"congestion": stable_congestion(congestion_block(tmp_path))})
    line = capsys.readouterr().out
    assert line.startswith("# congestion: controller_loop_p50_ms 0.8, controller_loop_p99_ms 1.045, ")
    assert "ce_marked_pkts 389" in line and "None" not in line and "enabled" not in line and "pause" not in line
