"""Start/stop objects as context managers that clean up after a failed start too."""
from __future__ import annotations


class StartStop:
    """``with obj:`` calls ``start()``; ``stop()`` runs on exit and also when ``start()`` fails
    half-way (KeyboardInterrupt included), so whatever was created is removed.
    ``stop()`` must therefore cope with a partial start and be safe to call twice."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
