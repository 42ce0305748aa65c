"""This process (docs/architecture.md): SIGINT/SIGTERM handling (:mod:`testbed.process.signals`), start/stop that a
signal cannot cut in half (:mod:`testbed.process.lifecycle`) and the exit codes (:mod:`testbed.process.exitcodes`).

The bottom of ``testbed/``: it imports nothing of the testbed, so the emulation, the sensors and the workloads
can all use it.
"""
