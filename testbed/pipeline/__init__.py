"""The run pipeline (docs/architecture.md): one ``testbed run`` from a validated scenario to its results directory.

:mod:`testbed.pipeline.runner` runs the steps in order; :mod:`testbed.pipeline.context` is the run's state
(:class:`~testbed.pipeline.context.RunContext`, :class:`~testbed.pipeline.context.Recording`);
:mod:`testbed.pipeline.interactive` is ``--interactive``'s Mininet CLI with the agents up.
"""
