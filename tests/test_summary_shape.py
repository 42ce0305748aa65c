"""summary.json's ``congestion`` block has one shape in every run (seen: null without ECN/PFC, so a script's
``summary["congestion"].get(...)`` crashed): ``enabled`` and every figure, None where not measured."""
from loop_results import ECN_LOOP, write_loop_result
from testbed.results.congestion import CONGESTION_KEYS, congestion_block, stable_congestion
from testbed.pipeline.printing import print_blocks


def test_a_run_without_the_loop_has_every_key_none_and_enabled_false():
    block = stable_congestion(None)
    assert tuple(block) == CONGESTION_KEYS and len(CONGESTION_KEYS) == len(set(CONGESTION_KEYS))
    assert block["enabled"] is False and all(v is None for k, v in block.items() if k != "enabled")
    assert block.get("pfc") is None and (block.get("pfc") or {}).get("xoff_bytes") is None  # a script's chain


def test_a_run_with_ecn_has_the_same_keys_its_figures_and_none_for_pfc(tmp_path):
    write_loop_result(tmp_path, ECN_LOOP)
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
    write_loop_result(tmp_path, ECN_LOOP)
    print_blocks({"congestion": stable_congestion(congestion_block(tmp_path))})
    line = capsys.readouterr().out
    assert line.startswith("# congestion: controller_loop_p50_ms 0.8, controller_loop_p99_ms 1.045, ")
    assert "ce_marked_pkts 389" in line and "None" not in line and "enabled" not in line and "pause" not in line


def test_the_transport_keys_cover_what_the_totals_hold():
    import pandas as pd
    from testbed.measure.transport_totals import transport_totals
    from testbed.results.shape import TRANSPORT_KEYS
    qps = pd.DataFrame([
        {"role": "requester", "tx_pkts": 30, "retx_pkts": 0, "retx_bytes": 0, "posted_bytes": 8192,
         "acked_bytes": 8192, "timeouts": 0, "naks_rx": 0, "acks_rx": 5, "cnps_rx": 0},
        {"role": "responder", "rx_pkts": 20, "delivered_bytes": 8192, "order_errors": 0, "dup_pkts": 0,
         "acks_tx": 5, "naks_tx": 0, "cnps_tx": 0, "ce_pkts": 0, "max_reorder_pkts": 0, "out_of_order_pkts": 0},
    ])
    qps["rank"], qps["peer"] = 0, 1
    assert set(transport_totals(qps, [35], 0, 16)) <= set(TRANSPORT_KEYS)
