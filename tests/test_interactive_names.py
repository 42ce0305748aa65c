"""--cli names (testbed.pipeline.interactive), without a fabric: the prompt takes bare names (``h1``) in every command
and Mininet's output shows them bare (seen: ``pingall`` printed ``tb3fa1h1 -> tb3fa1h2 ...``)."""
import io

from mininet.log import lg, output, setLogLevel

from testbed.pipeline import interactive
from testbed.pipeline.interactive import _BareNames

RID = "tb3fa1"


def _cli():
    cli = interactive.TestbedCLI.__new__(interactive.TestbedCLI)  # Mininet's CLI runs its loop in __init__: only the name handling here
    cli.rid, cli.stdout = RID, io.StringIO()
    cli.mn = {RID + n: object() for n in ("h1", "h2", "s1", "l1")}
    return cli


def test_every_command_takes_bare_node_names():
    cli = _cli()
    assert cli.precmd("h1 ping -c1 h2") == f"{RID}h1 ping -c1 {RID}h2"
    assert cli.precmd("iperf h1 h2") == f"iperf {RID}h1 {RID}h2"
    assert cli.precmd("link s1 l1 down") == f"link {RID}s1 {RID}l1 down"
    assert cli.precmd(f"{RID}h1 ping h9") == f"{RID}h1 ping h9"  # full names as they are; no such node h9
    assert cli.precmd("sh ovs-vsctl show h1") == "sh ovs-vsctl show h1"  # a root shell line as typed
    assert cli.precmd("pingall # comment") == "pingall "


def test_mininet_output_shows_bare_names_and_interfaces():
    text = io.StringIO()
    bare = _BareNames(text, RID)
    bare.write(f"{RID}h1 -> {RID}h2 X \n{RID}h1 {RID}h1-eth0:{RID}l1-eth3\n")
    bare.write(f"results in /r/20261202T150000Z-quickstart-{RID}/ops.csv; {RID}\n")  # a path, no name: as is
    assert text.getvalue() == ("h1 -> h2 X \nh1 h1-eth0:l1-eth3\n"
                               f"results in /r/20261202T150000Z-quickstart-{RID}/ops.csv; {RID}\n")


def test_a_mininet_command_prints_bare_names_a_host_command_as_the_host_prints(capsys):
    cli = _cli()
    setLogLevel("output")
    seen = []
    cli.do_pingall = lambda line: output(f"{RID}h1 -> {RID}h2 \n")  # Mininet's pingall prints through its logger
    cli.default = lambda line: (seen.append(line), output(f"3: {RID}h1-eth0: <UP>\n"))
    stream = lg.ch.stream
    try:
        lg.ch.stream = io.StringIO()
        cli.onecmd(cli.precmd("pingall"))
        cli.onecmd(cli.precmd("h1 ip -o link"))
        printed = lg.ch.stream.getvalue()
    finally:
        lg.ch.stream = stream
        setLogLevel("warning")
    assert printed == f"h1 -> h2 \n3: {RID}h1-eth0: <UP>\n"  # the host's own interface name, as in its shell
    assert seen == [f"{RID}h1 ip -o link"]
