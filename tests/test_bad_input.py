"""Malformed scenarios: one clear error naming the key path, exit code 2, nothing created."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.spec.scenario import ScenarioError, parse_scenario

OK_WORKLOAD = "workload: {sizes: {min_bytes: 64KiB, max_bytes: 64KiB}}\n"

# (scenario text, words the error must contain)
BAD = {
    "unknown_top_key": ("fabrik: {spines: 2}\n" + OK_WORKLOAD, ["fabrik", "unknown key", "fabric"]),
    "unknown_nested_key": ("fabric: {spine: 2}\n" + OK_WORKLOAD, ["fabric.spine", "unknown key", "spines"]),
    "zero_spines": ("fabric: {spines: 0}\n" + OK_WORKLOAD, ["fabric.spines", "greater than or equal to 1"]),
    "negative_rate": ("fabric: {host_link_bps: -10}\n" + OK_WORKLOAD, ["fabric.host_link_bps", "greater than or equal to 100000"]),
    "rate_garbage": ("fabric: {fabric_link_bps: fast}\n" + OK_WORKLOAD, ["fabric.fabric_link_bps", "'10M'"]),
    "more_hosts_than_ports": ("fabric: {hosts_per_leaf: 30, spines: 4, ports_per_switch: 32}\n" + OK_WORKLOAD,
                              ["fabric.hosts_per_leaf", "ports_per_switch"]),
    "wrong_type": ("fabric: {leaves: two}\n" + OK_WORKLOAD, ["fabric.leaves", "valid integer"]),
    "bad_mtu": ("transport: {payload_bytes: 1000}\n" + OK_WORKLOAD, ["transport.payload_bytes", "1024"]),
    "no_workload_source": ("workload: {iterations: 3}\n", ["workload", "exactly one of"]),
    "sizes_reversed": ("workload: {sizes: {min_bytes: 1MiB, max_bytes: 64KiB}}\n",
                       ["workload.sizes", "below min_bytes"]),
    "single_host": ("fabric: {leaves: 1, hosts_per_leaf: 1}\n" + OK_WORKLOAD, ["at least 2 hosts"]),
    "not_a_mapping": ("- just\n- a list\n", ["top level must be a mapping"]),
    "bad_yaml": ("fabric: {spines: [\n", ["not valid YAML"]),
    "missing_simai_file": ("workload: {simai: {path: nowhere.txt}}\n", ["workload.simai.path", "no such file"]),
    "bad_buffer": ("fabric: {buffer_bytes: 10 apples}\n" + OK_WORKLOAD, ["fabric.buffer_bytes", "not a size"]),
    "buffer_below_one_frame": ("fabric: {buffer_bytes: 10B}\n" + OK_WORKLOAD, ["fabric.buffer_bytes", ">= 1514"]),
    "rate_too_low": ("fabric: {host_link_bps: 1}\n" + OK_WORKLOAD, ["fabric.host_link_bps", "100000"]),
    "boolean_count": ("fabric: {spines: true}\n" + OK_WORKLOAD, ["fabric.spines", "boolean"]),
    "duplicate_key": ("fabric: {spines: 2}\nfabric: {spines: 1}\n" + OK_WORKLOAD, ["appears twice"]),
    "ack_beyond_window": ("transport: {window_pkts: 8, ack_every_pkts: 16}\n" + OK_WORKLOAD,
                          ["transport.ack_every_pkts", "window_pkts"]),
    "unknown_congestion_control": ("transport: {congestion_control: timely}\n" + OK_WORKLOAD,
                                   ["transport.congestion_control", "'timely'", "registered: dcqcn, none"]),
    "unknown_entropy": ("transport: {entropy: letflow}\n" + OK_WORKLOAD,
                        ["transport.entropy", "'letflow'", "registered: flowlet, per_flow, spray"]),
    "unknown_loss_recovery": ("transport: {loss_recovery: irn}\n" + OK_WORKLOAD,
                              ["transport.loss_recovery", "'irn'", "allowed: go_back_n, selective_repeat"]),
    "spray_with_go_back_n": ("transport: {entropy: spray, loss_recovery: go_back_n}\n" + OK_WORKLOAD,
                             ["transport.loss_recovery: go_back_n", "entropy: spray", "selective_repeat"]),
    "reference_slower_than_link": ("reference_link_bps: 1M\n" + OK_WORKLOAD, ["reference_link_bps", "below"]),
    # C08: YAML 1.1 number traps, named by key path and the literal as written
    "octal_buffer": ("fabric: {buffer_bytes: 0100000}\n" + OK_WORKLOAD,
                     ["fabric.buffer_bytes", "0100000", "32768", "leading zero"]),
    "sexagesimal_rto": ("transport: {rto_us: 1:30}\n" + OK_WORKLOAD, ["transport.rto_us", "1:30", "90", "base-60"]),
    "octal_in_list_key": ("workload: {sizes: {min_bytes: 064, max_bytes: 64KiB}}\n",
                          ["workload.sizes.min_bytes", "064", "52"]),
    # values that cannot work
    "rto_below_ack_time": ("transport: {rto_us: 1000}\n" + OK_WORKLOAD, ["transport.rto_us: 1000 us is below 6974 us"]),
    "cpu_idle_zero": ("fidelity: {min_cpu_idle_pct: 0}\n" + OK_WORKLOAD,
                      ["fidelity.min_cpu_idle_pct", "write off (or null)"]),
    "link_ratio_zero": ("fidelity: {min_link_rate_ratio: 0.0}\n" + OK_WORKLOAD,
                        ["fidelity.min_link_rate_ratio", "write off (or null)"]),
    "max_bytes_per_size_zero": ("workload: {sizes: {min_bytes: 64KiB, max_bytes: 64KiB}, max_bytes_per_size: 0}\n",
                                ["workload.max_bytes_per_size", "write off (or null)"]),
    "buffer_above_u32": ("fabric: {buffer_bytes: 5GiB}\n" + OK_WORKLOAD, ["fabric.buffer_bytes", "32-bit"]),
    # C18: an alias bomb is refused in a few lines
    "alias_bomb": (None, ["aliases expand to more than"]),
}


def alias_bomb() -> str:
    """C18: nested aliases, each level repeating the previous ten times (411 bytes, 10**8 values)."""
    text = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for x, y in zip("bcdefgh", "abcdefg"):
        text += f"{x}: &{x} [" + ",".join([f"*{y}"] * 10) + "]\n"
    return text + "fabric: {spines: *h}\n" + OK_WORKLOAD


BAD["alias_bomb"] = (alias_bomb(), BAD["alias_bomb"][1])


@pytest.mark.parametrize("name", sorted(BAD))
def test_parse_error_names_key(name, tmp_path):
    text, words = BAD[name]
    from testbed.workloads import load_scenario
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    with pytest.raises(ScenarioError) as ei:
        load_scenario(p)
    msg = str(ei.value)
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_valid_units_parse():
    s = parse_scenario({"fabric": {"host_link_bps": "10Mbit", "fabric_link_bps": 2e7, "buffer_bytes": "64KiB"},
                        "workload": {"sizes": {"min_bytes": "64KiB", "max_bytes": "4MiB", "factor": 4}}})
    assert s.fabric.host_link_bps == 10e6 and s.fabric.fabric_link_bps == 20e6
    assert s.fabric.buffer_bytes == 65536
    assert s.workload.sizes.sizes() == [65536, 262144, 1048576, 4194304]
    assert s.scale_factor == pytest.approx(400e9 / 10e6)
    with pytest.raises(Exception):
        s.fabric.spines = 3  # frozen


def _kernel_snapshot():
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = sorted(line.split(":")[1].strip().split("@")[0] for line in links.splitlines())
    br = subprocess.run(["ovs-vsctl", "--timeout=3", "list-br"], capture_output=True, text=True).stdout
    netns = sorted(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else []
    state = sorted(os.listdir("/run/aifabric")) if os.path.isdir("/run/aifabric") else []
    return {"links": names, "bridges": br.split(), "netns": netns, "state": state}


def _created_by_us(before: dict, after: dict, our_pid: int) -> dict:
    """Objects new in ``after`` that are still there 2 s later, less those of other runs.

    The machine may be shared: the CLI call under test (``our_pid``) has exited,
    so every run lock still held belongs to someone else, as does every run
    whose state file names another process; objects that vanish within 2 s
    belong to someone's short-lived probe (nothing would remove ours).
    """
    from topology.naming import run_id_of
    from testbed.host.runlock import is_live, known_runs, read_state

    def new_objects(snap):
        others = {rid for rid in known_runs()
                  if is_live(rid) or (read_state(rid) or {}).get("pid", our_pid) != our_pid}
        out = {}
        for kind in before:
            new = set(snap[kind]) - set(before[kind])
            if others:
                new = {n for n in new if (n.split(".")[0] if kind == "state" else run_id_of(n)) not in others
                       and n != "ovs-netdev"}
            out[kind] = new
        return out

    created = new_objects(after)
    if any(created.values()):
        time.sleep(2.0)
        later = new_objects(_kernel_snapshot())
        created = {kind: created[kind] & later[kind] for kind in created}
    return {kind: sorted(v) for kind, v in created.items()}


def _cli_run(scenario: Path, results: Path, *extra: str) -> subprocess.CompletedProcess:
    """``testbed run`` as a child process; the result carries the child's ``pid``."""
    argv = [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--results", str(results), *extra]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(timeout=60)
    res = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    res.pid = proc.pid
    return res


@pytest.mark.skipif(os.geteuid() != 0, reason="the CLI run path needs root")
@pytest.mark.parametrize("name", sorted(BAD))
def test_cli_rejects_before_touching_kernel(name, tmp_path):
    text, words = BAD[name]
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    before = _kernel_snapshot()
    res = _cli_run(p, tmp_path / "res")
    assert res.returncode == 2, res.stderr
    assert "error" in res.stderr and words[0] in res.stderr
    assert len(res.stderr) < 4096, len(res.stderr)
    created = _created_by_us(before, _kernel_snapshot(), res.pid)
    assert not any(created.values()), created
    assert not (tmp_path / "res").exists()


def _simai_file(tmp_path: Path, size_bytes: int) -> Path:
    """A SimAI/AICB workload with one ALLREDUCE of ``size_bytes`` on 8 GPUs."""
    p = tmp_path / "huge.txt"
    p.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 1 ep: 1 pp: 1 vpp: 1 ga: 1 "
                 "all_gpus: 8 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0\n1\n"
                 f"grad\t-1\t1000\tNONE\t0\t1000\tNONE\t0\t1000\tALLREDUCE\t{size_bytes}\t100\n")
    return p


FABRIC_8 = "fabric: {spines: 2, leaves: 4, hosts_per_leaf: 2, host_link_bps: 10M, fabric_link_bps: 10M}\n"


def _run_level_cases(tmp_path: Path) -> dict:
    """Rejections after parsing, still before anything is built: (scenario, extra args, results, words)."""
    ok = tmp_path / "ok.yaml"
    ok.write_text(FABRIC_8 + OK_WORKLOAD)
    huge = tmp_path / "huge.yaml"
    huge.write_text(FABRIC_8 + f"workload: {{simai: {{path: {_simai_file(tmp_path, 4919918592)}, size_scale: 1.0}}}}\n")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    return {
        # C11: one all-reduce of 4919918592 B on 8 hosts at 10 Mbit/s: about 2 hours, refused naming the key
        "duration_over_cap": (huge, [], tmp_path / "res", ["estimated duration 2.0", "workload.simai.size_scale",
                                                           "--max-duration"]),
        "duration_bad_override": (huge, ["--max-duration", "soon"], tmp_path / "res", ["'soon' is not a duration"]),
        "results_is_a_file": (ok, [], a_file, ["--results", "is not a directory"]),
        "results_under_a_file": (ok, [], a_file / "sub", ["--results", "is not a directory"]),
        "results_not_writable": (ok, [], Path("/proc/testbed-results"), ["--results", "cannot be created"]),
    }


RUN_LEVEL = ["duration_over_cap", "duration_bad_override", "results_is_a_file", "results_under_a_file",
             "results_not_writable"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the CLI run path needs root")
@pytest.mark.parametrize("name", RUN_LEVEL)
def test_cli_run_level_rejections_before_touching_kernel(name, tmp_path):
    scenario, extra, results, words = _run_level_cases(tmp_path)[name]
    before = _kernel_snapshot()
    res = _cli_run(scenario, results, *extra)
    assert res.returncode == 2, res.stderr
    for w in words:
        assert w in res.stderr, f"{w!r} not in {res.stderr!r}"
    created = _created_by_us(before, _kernel_snapshot(), res.pid)
    assert not any(created.values()), created
    assert not (tmp_path / "res").exists()


def test_alias_bomb_is_small_and_short(tmp_path):
    """C18: a 411-byte alias bomb gives one error under 4 KB; a smaller expansion's value is clipped."""
    from testbed.workloads import load_scenario
    text = alias_bomb()
    assert len(text.encode()) < 512  # the case's file was 378 bytes
    p = tmp_path / "bomb.yaml"
    p.write_text(text)
    with pytest.raises(ScenarioError) as ei:
        load_scenario(p)
    assert len(str(ei.value)) < 4096 and "aliases expand to more than 10000 values" in str(ei.value)
    # 1000 values: allowed by the loader, so the validation error must clip the value it quotes
    p.write_text('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
                 'b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\n'
                 "fabric: {spines: *c, leaves: *c, hosts_per_leaf: *c}\n" + OK_WORKLOAD)
    with pytest.raises(ScenarioError) as ei:
        load_scenario(p)
    msg = str(ei.value)
    assert "fabric.spines" in msg and "fabric.hosts_per_leaf" in msg and len(msg) < 4096, len(msg)


def test_recursive_alias_is_refused(tmp_path):
    from testbed.workloads import load_scenario
    p = tmp_path / "rec.yaml"
    p.write_text("a: &a [1, *a]\n" + OK_WORKLOAD)
    with pytest.raises(ScenarioError, match="recursive"):
        load_scenario(p)


def test_exponent_sizes_and_rates_read_alike(tmp_path):
    """C08: 1e5 (a string in YAML 1.1) and 1.0e+5 are the same number, for sizes and rates alike."""
    from testbed.workloads import load_scenario
    p = tmp_path / "exp.yaml"
    p.write_text("fabric: {buffer_bytes: 1e5, host_link_bps: 1e7, fabric_link_bps: 1.0e+7}\n"
                 "workload: {sizes: {min_bytes: 1.0e+5, max_bytes: '2e5'}}\n")
    s = load_scenario(p)
    assert s.fabric.buffer_bytes == 100000 and isinstance(s.fabric.buffer_bytes, int)
    assert s.fabric.host_link_bps == s.fabric.fabric_link_bps == 1e7
    assert s.workload.sizes.min_bytes == 100000 and s.workload.sizes.max_bytes == 200000
    p.write_text("fabric: {buffer_bytes: 1.5e3}\n" + OK_WORKLOAD)  # 1500: whole, but below one frame
    with pytest.raises(ScenarioError, match="fabric.buffer_bytes = 1500"):
        load_scenario(p)
    p.write_text("fabric: {buffer_bytes: 2.5e-1}\n" + OK_WORKLOAD)
    with pytest.raises(ScenarioError, match="fabric.buffer_bytes.*fractional.*0.25"):
        load_scenario(p)


def test_yaml12_scalars(tmp_path):
    """Decimal, hex and underscores are numbers; yes/no/on/off are strings, so off can switch a check off."""
    from testbed.spec.scenario import load_yaml
    d = load_yaml("a: 100000\nb: 0x10\nc: 1_000\nd: -0\ne: off\nf: yes\ng: true\nh: ~\ni: '0100'\nj: .5\n")
    assert d == {"a": 100000, "b": 16, "c": 1000, "d": 0, "e": "off", "f": "yes", "g": True, "h": None,
                 "i": "0100", "j": 0.5}
    with pytest.raises(ScenarioError, match=r"name: 012 is a number with a leading zero"):
        load_yaml("name: 012\n")


def test_quoted_leading_zero_reads_as_written():
    """A quoted literal is the decimal the user wrote, never octal."""
    s = parse_scenario({"fabric": {"buffer_bytes": "0100000"}, "workload": {"sizes": {"min_bytes": 65536}}})
    assert s.fabric.buffer_bytes == 100000


def test_off_switches_checks_off_explicitly():
    s = parse_scenario({"workload": {"sizes": {"min_bytes": 65536}, "max_bytes_per_size": "off"},
                        "fidelity": {"min_cpu_idle_pct": "off", "min_link_rate_ratio": None,
                                     "max_unexplained_drops_pkts": "off"}})
    assert s.workload.max_bytes_per_size is None
    assert s.fidelity.switched_off() == ["min_cpu_idle_pct", "max_unexplained_drops_pkts", "min_link_rate_ratio"]
    assert parse_scenario({"workload": {"sizes": {"min_bytes": 65536}}}).fidelity.switched_off() == []
    # 0 unexplained drops is the strictest limit, not a switch
    assert parse_scenario({"workload": {"sizes": {"min_bytes": 65536}},
                           "fidelity": {"max_unexplained_drops_pkts": 0}}).fidelity.max_unexplained_drops_pkts == 0


def test_manifest_echoes_every_parsed_number(tmp_path):
    """The manifest's scenario dump holds every parsed number and validates back to the same spec."""
    from testbed.workloads import load_scenario
    p = tmp_path / "s.yaml"
    p.write_text("fabric: {buffer_bytes: 1e5, host_link_bps: 20M}\ntransport: {rto_us: 20000}\n"
                 "workload: {sizes: {min_bytes: 64KiB, max_bytes: 1MiB}, max_bytes_per_size: off}\n")
    s = load_scenario(p)
    dumped = s.model_dump(mode="json")
    assert dumped["fabric"]["buffer_bytes"] == 100000 and dumped["fabric"]["host_link_bps"] == 20e6
    assert dumped["transport"]["rto_us"] == 20000 and dumped["workload"]["max_bytes_per_size"] is None
    assert parse_scenario(dumped) == s


def test_not_a_scenario_file(tmp_path):
    from testbed.workloads import load_scenario
    for path, words in ((Path("/dev/zero"), "not a regular file"), (tmp_path, "not a regular file")):
        with pytest.raises(ScenarioError, match=words):
            load_scenario(path)
    garbage = tmp_path / "garbage.yaml"
    garbage.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(ScenarioError, match="not UTF-8"):
        load_scenario(garbage)
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000)
    with pytest.raises(ScenarioError, match=str(deep)):
        load_scenario(deep)
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 << 20))
    with pytest.raises(ScenarioError, match="at most"):
        load_scenario(big)


def test_shipped_scenarios_are_valid():
    from testbed.workloads import load_scenario
    scenarios = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))
    assert len(scenarios) >= 2
    for p in scenarios:
        load_scenario(p)


@pytest.mark.parametrize("where, key, path, hint, allowed_has", [
    ((), "work-load", "work-load", "workload", "tenants"),
    (("workload",), "warm-up", "workload.warm-up", "warmup_iterations", "iterations"),
    (("workload",), "warmup", "workload.warmup", "warmup_iterations", "sizes"),
    (("workload", "sizes"), "max-bytes", "workload.sizes.max-bytes", "max_bytes", "min_bytes"),
    (("fabric",), "link-rate", "fabric.link-rate", None, "host_link_bps"),
    # the fabric section's keys are checked by testbed.spec.plugins (a plugin choice: kind): hints there too
    (("fabric",), "spine", "fabric.spine", "spines", "leaves"),
    (("fabric",), "leafs", "fabric.leafs", "leaves", "spines"),
    (("fabric",), "host_per_leaf", "fabric.host_per_leaf", "hosts_per_leaf", "spines"),
])
def test_unknown_key_with_a_dash_is_named_with_the_keys_of_its_own_section(where, key, path, hint, allowed_has):
    import copy

    import yaml

    data = copy.deepcopy(yaml.safe_load((Path(__file__).parents[1] / "scenarios" / "quickstart.yaml").read_text()))
    node = data
    for part in where:
        node = node[part]
    node[key] = 1
    with pytest.raises(ScenarioError) as e:
        parse_scenario(data)
    line = str(e.value).splitlines()[1].strip()
    assert line.startswith(f"{path}: unknown key"), line
    assert (f"(did you mean {hint}?)" in line) if hint else ("did you mean" not in line), line
    allowed = line.split("allowed keys here: ", 1)[1].split(", ")
    assert allowed_has in allowed and "(top level)" not in line


def test_a_file_that_never_ends_or_never_answers_is_refused_in_seconds(tmp_path):
    from traffic.workloads.files import UnreadableFile, read_bounded

    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableFile, match="not a regular file"):
        read_bounded(fifo, 100)
    assert read_bounded("/proc/self/status", 1 << 20).startswith(b"Name:")  # procfs: size 0, content read
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 5000)
    assert len(read_bounded(big, 1000)) == 1001  # one byte past the limit tells the caller


def test_a_run_refused_for_its_results_directory_prints_only_the_refusal(tmp_path):
    quick = Path(__file__).parents[1] / "scenarios" / "quickstart.yaml"
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(quick), "--results", "/proc/nope"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "--results /proc/nope" in r.stderr, r.stderr


def test_an_unknown_key_does_not_hide_the_other_errors_of_its_section():
    """A plugin section checks its keys before its fields: the fabric's other errors were hidden behind the
    first unknown key (a fresh user: ``fabric: {foo: 1, bar: 2, spines: -1, buffer_bytes: 10Mbps}`` named
    only fabric.foo). Every bad key path is named."""
    with pytest.raises(ScenarioError) as e:
        parse_scenario({"fabric": {"foo": 1, "bar": 2, "spines": -1, "buffer_bytes": "10Mbps"},
                        "workload": {"collective": "allreduce"}})
    msg = str(e.value)
    for path in ("fabric.foo: unknown key", "fabric.bar: unknown key", "fabric.spines:", "fabric.buffer_bytes:",
                 "workload:"):
        assert f"\n  {path}" in msg, (path, msg)
