"""The run pipeline (docs/architecture.md, "Layers"): one ``testbed run`` from a validated scenario to its results
directory.

:mod:`testbed.pipeline.runner` runs the steps in order; :mod:`testbed.pipeline.context` is the run's state
(:class:`~testbed.pipeline.context.RunContext`, :class:`~testbed.pipeline.context.Recording`);
:mod:`testbed.pipeline.manifest` writes manifest.json, :mod:`testbed.pipeline.judge` the fidelity verdict of the
finished run, :mod:`testbed.pipeline.summary` summary.json (one ``RunSummary``) and :mod:`testbed.pipeline.printing`
what the run prints; :mod:`testbed.pipeline.interactive` is ``--interactive``'s Mininet CLI with the agents up;
:mod:`testbed.pipeline.calibrate` (``testbed doctor --calibrate``) runs ``testbed run`` at a series of rates.
"""
