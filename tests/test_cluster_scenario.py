"""The ``cluster`` section and ``testbed run --servers/--placement``: refused with clear errors before anything
touches the kernel; the manifest's placement block."""
import pytest

from testbed.cli import main
from testbed.pipeline.manifest import cluster_block
from testbed.pipeline.context import RunContext
from testbed.spec.cluster import parse_servers, with_cluster
from testbed.spec.scenario import ScenarioError, parse_scenario

BASE = {"fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2},
        "workload": {"sizes": {"min_bytes": 65536, "max_bytes": 65536}}}


def _spec(cluster=None, **extra):
    data = {**BASE, **extra}
    if cluster is not None:
        data["cluster"] = cluster
    return parse_scenario(data)


@pytest.mark.parametrize("cluster, message", [
    ({"servers": []}, "cluster.servers: Tuple should have at least 1 item"),
    ({"servers": ["srv1", "srv1"]}, "server 'srv1' is listed twice"),
    ({"servers": ["srv1"], "placement": "rack"}, "cluster.placement: Input should be 'pod' or 'leaf'"),
    ({"servers": ["srv1"], "hosts": 2}, "cluster.hosts: unknown key; allowed keys here: placement, servers"),
    ({"placement": "pod"}, "cluster.servers: Field required"),
    ({"servers": ["bad name"]}, "server name 'bad name' is not a host name"),
])
def test_bad_cluster_section_is_refused_naming_the_key(cluster, message):
    with pytest.raises(ScenarioError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _spec(cluster)


def test_a_feature_a_cluster_run_lacks_is_refused_by_its_key():
    with pytest.raises(ScenarioError, match=r"cluster: fabric.link_delay_us not supported in a run over several"):
        parse_scenario({**BASE, "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2, "link_delay_us": 100},
                        "cluster": {"servers": ["a", "b"]}})
    with pytest.raises(ScenarioError, match=r"cluster: fabric.queue_backend other than htb_bfifo, "
                                            r"controller.framework: ryu not supported"):
        _spec({"servers": ["a", "b"]}, fabric={**BASE["fabric"], "queue_backend": "htb_classes"},
              controller={"framework": "ryu"})


def test_command_line_overrides_the_section_and_is_checked_the_same_way():
    spec = _spec({"servers": ["srv1", "srv2"], "placement": "leaf"})
    assert with_cluster(spec).cluster == spec.cluster
    got = with_cluster(spec, ("a", "b", "c"), None).cluster
    assert got.servers == ("a", "b", "c") and got.placement == "leaf"
    assert with_cluster(_spec(), ("a",), None).cluster.placement == "pod"
    assert with_cluster(spec, None, "pod").cluster.servers == ("srv1", "srv2")
    with pytest.raises(ScenarioError, match="--servers: server 'a' is listed twice"):
        with_cluster(spec, ("a", "a"), None)
    with pytest.raises(ScenarioError, match="--placement needs servers"):
        with_cluster(_spec(), None, "pod")
    with pytest.raises(ScenarioError, match=r"--placement: 'rack' is not a placement policy; allowed: pod, leaf"):
        with_cluster(spec, None, "rack")
    for text in ("", ",", "a,,b"):
        with pytest.raises(ValueError, match="give one or more server names"):
            parse_servers(text)
    assert parse_servers("srv1, srv2") == ("srv1", "srv2")


def test_manifest_records_the_placement(tmp_path):
    ctx = RunContext.new(_spec({"servers": ["srv1", "srv2"]}), None, tmp_path, "tb0a0a", [])
    block = cluster_block(ctx)
    assert block["policy"] == "pod"
    assert set(block["servers"]) == {"srv1", "srv2"} and all(block["servers"].values())
    assert len(block["crossing_links"]) == 1  # one spine: the second leaf's uplink crosses
    assert cluster_block(RunContext.new(_spec(), None, tmp_path, "tb0a0a", [])) is None


def test_testbed_run_refuses_bad_servers_before_building(tmp_path, capsys, monkeypatch):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("fabric: {spines: 1, leaves: 2, hosts_per_leaf: 2, link_delay_us: 100}\n"
                        "workload: {sizes: {min_bytes: 64KiB, max_bytes: 64KiB}}\n")
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert main(["run", str(scenario), "--results", str(tmp_path / "r"), "--servers", "srv1,srv1"]) == 2
    assert "--servers: server 'srv1' is listed twice" in capsys.readouterr().err
    assert main(["run", str(scenario), "--results", str(tmp_path / "r"), "--servers", "srv1,srv2"]) == 2
    assert "cluster: fabric.link_delay_us not supported" in capsys.readouterr().err
    assert main(["run", str(scenario), "--results", str(tmp_path / "r"), "--placement", "pod"]) == 2
    assert "--placement needs servers" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
