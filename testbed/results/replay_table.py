"""The replay table printed at the end of a SimAI/AICB replay: per-layer communication, iteration, exposed share."""
from __future__ import annotations


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def per_layer(steps: list) -> list[dict]:
    """Steps of summary.json ``replay`` grouped by file row, in first-seen order.

    Returns ``{"line", "layer", "fwd_s", "ig_s", "wg_s" (None when the phase issues
    nothing), "exposed_s", "where"}`` per row; ``where`` joins the rows' places
    (fabric, scale_up) and the collectives' scopes.
    """
    rows: dict = {}
    for s in steps:
        r = rows.setdefault(s["line"], {"line": s["line"], "layer": s["layer"], "fwd_s": None, "ig_s": None,
                                        "wg_s": None, "exposed_s": 0.0, "where": []})
        r[f"{s['phase']}_s"] = (r[f"{s['phase']}_s"] or 0.0) + s["comm_s"]
        r["exposed_s"] += s["exposed_s"]
        place = f"{s['collective']}@{s['where']}"
        if place not in r["where"]:
            r["where"].append(place)
    return [{**r, "where": " ".join(r["where"])} for r in rows.values()]


def format_replay_table(block: dict, scale_factor: float, size_scale: float) -> str:
    """Text of the table for summary.json's ``replay`` block (testbed.workloads.replay.run.replay_block).

    Times in emulated ms, means over iterations; ``scale_factor`` (dilation) and
    ``size_scale`` only annotate the header.
    """
    lines = [f"# replay of {block['file']}: overlap {block['overlap']}, {block['iterations']} iteration(s), "
             f"{block['gpus_per_host']} GPU(s) per host; compute x {block['compute_scale']:g} (dilation "
             f"{scale_factor:g} x size_scale {size_scale:g} when auto); communication per layer in emulated ms "
             "(fabric: first rank's start to last rank's end; scale_up: modelled), exposed = compute stream "
             "waiting",
             f"# {'line':>5} {'layer':<22} {'fwd_ms':>9} {'ig_ms':>9} {'wg_ms':>9} {'exposed_ms':>10}  collectives"]
    for r in per_layer(block["steps"]):
        lines.append(f"  {r['line']:>5} {r['layer'][:22]:<22} {_ms(r['fwd_s']):>9} {_ms(r['ig_s']):>9} "
                     f"{_ms(r['wg_s']):>9} {_ms(r['exposed_s']):>10}  {r['where']}")
    lines.append(f"  {'':>5} {'(end of iteration)':<22} {'':>9} {'':>9} {'':>9} {_ms(block['drain_s']):>10}  "
                 "waiting for the streams to drain")
    eq = block.get("equivalent_iteration_ms")
    lines.append(f"# iteration {block['iteration_s']:.3f} s"
                 + (f" (equivalent {eq:.2f} ms unscaled)" if eq is not None else "")
                 + f", compute {block['compute_s_per_iteration']:.3f} s, communication "
                 f"{block['comm_s_per_iteration']:.3f} s, exposed communication {block['exposed_comm_s']:.3f} s, "
                 f"exposed share {block['exposed_share']:.3f}"
                 + (f", overhead (not compute, not communication) {block['overhead_s']:.3f} s"
                    if block.get("overhead_s") else ""))
    groups = block.get("groups")
    if groups:
        lines.append("# per group: " + ", ".join(
            f"{g} {v['comm_s']:.3f} s in {v['ops']:g} ops (busy {v['busy_s']:.3f} s)" for g, v in groups.items())
            + "; exposed communication = min(iteration - compute-only schedule, communication)")
    pipe = block.get("pipeline")
    if pipe and pipe["stages"] > 1:
        lines.append(f"# pipeline: {pipe['stages']} stages x {pipe['micro_batches']} micro-batches, "
                     f"{pipe['schedule']}; bubble per stage (idle not waiting on its own collectives) "
                     + ", ".join(f"{st['bubble_fraction']:.3f}" for st in block["stages"])
                     + f"; communication-free schedule "
                     + ", ".join(f"{st['bubble_fraction_schedule']:.3f}" for st in block["stages"])
                     + f"; formula (p-1)/(m+p-1) = {pipe['bubble_fraction_formula']:.3f}")
    return "\n".join(lines)


def format_saving(saving: dict) -> str:
    """The line of summary.json's ``replay.saving`` (overlap compare): measured against the formula and the model."""
    return (f"# overlap saved {saving['measured_s']:.3f} s per iteration; formula {saving['formula_s']:.3f} s "
            f"(serialized communication {saving['serialized_comm_s']:.3f} s - exposed when overlapped "
            f"{saving['exposed_comm_on_s']:.3f} s: {saving['hidden_share']:.0%} hidden), model "
            f"{saving['model_s']:.3f} s; {saving['formula']}")


def replay_text(replay: dict, scale_factor: float, size_scale: float) -> list[str]:
    """The printed tables of summary.json's ``replay`` block (both, off then on, with ``overlap: compare``, and
    the saving of overlap)."""
    blocks = [replay["off"], replay["on"]] if replay["overlap"] == "compare" else [replay]
    lines = [format_replay_table(b, scale_factor, size_scale) for b in blocks]
    return lines + ([format_saving(replay["saving"])] if "saving" in replay else [])
