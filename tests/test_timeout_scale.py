"""testbed.host.timeout_scale: start-up timeouts x $TESTBED_TIMEOUT_SCALE, bad values refused by name."""
import sys
import time

import pytest

from testbed.emulation import controller_proc
from testbed.host.timeout_scale import ENV, startup_s, timeout_scale


def test_unset_is_one(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert timeout_scale() == 1.0
    assert startup_s(controller_proc.LISTEN_TIMEOUT_S) == controller_proc.LISTEN_TIMEOUT_S


def test_scale_multiplies(monkeypatch):
    monkeypatch.setenv(ENV, "8")
    assert startup_s(20.0) == 160.0


@pytest.mark.parametrize("bad", ["0.5", "fast", "inf", "nan", "-3"])
def test_bad_scale_named(monkeypatch, bad):
    monkeypatch.setenv(ENV, bad)
    with pytest.raises(ValueError, match=rf"{ENV}=.*allowed a number >= 1"):
        timeout_scale()


class _SilentController(controller_proc.ControllerProcess):
    """A controller process that runs but never listens (a real process, no port opened)."""

    def __init__(self, tmp_path):  # noqa: D107 (no settings needed: command() is replaced)
        self.port = controller_proc.free_tcp_port()
        self.ready_path = tmp_path / "controller.ready"
        self.log_path = tmp_path / "controller.log"
        self.proc = None
        self._out = None
        self.stopped_on_purpose = False

    def command(self):
        return [sys.executable, "-c", "import time; time.sleep(60)"], None


def test_controller_listen_wait_scales(monkeypatch, tmp_path):
    """A controller that never listens is given up on after LISTEN_TIMEOUT_S x scale, and the error
    names the scaled wait and the variable to raise."""
    monkeypatch.setattr(controller_proc, "LISTEN_TIMEOUT_S", 0.5)
    monkeypatch.setenv(ENV, "3")
    ctl = _SilentController(tmp_path)
    t0 = time.monotonic()
    try:
        with pytest.raises(controller_proc.ControllerError, match=rf"within 2 s.*raise {ENV} above 3"):
            ctl.start()
    finally:
        ctl.stop()
    assert 1.4 <= time.monotonic() - t0 < 10
