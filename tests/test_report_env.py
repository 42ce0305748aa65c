"""``TESTBED_REPORT=off``: a run writes no report.html and says how to make it (testbed.report.command)."""
from testbed.report import command


def test_off_writes_nothing_and_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_REPORT", "off")
    line = command.after_run(tmp_path)
    assert line == f"# report: not written (TESTBED_REPORT=off; make it with: testbed report {tmp_path})"
    assert list(tmp_path.iterdir()) == []


def test_a_value_neither_on_nor_off_is_named_and_the_report_is_still_tried(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_REPORT", "no")
    line = command.after_run(tmp_path)  # not a run directory: the report's own warning follows
    assert line.startswith("testbed: warning: TESTBED_REPORT='no' is neither on nor off (the report is made); "
                           "testbed: warning: report.html not written: "), line


def test_on_is_the_default(tmp_path, monkeypatch):
    monkeypatch.delenv("TESTBED_REPORT", raising=False)
    assert command.after_run(tmp_path).startswith("testbed: warning: report.html not written: ")
