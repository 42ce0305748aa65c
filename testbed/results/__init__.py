"""Results of a run. ``testbed.results.load(run_dir)``: the run directory as a
:class:`testbed.results.rundir.RunDir` (its tables as DataFrames, its JSON files)."""


def __getattr__(name):  # lazy: importing a results module does not import pandas through the reader
    if name in ("RunDir", "TableError", "NotARunDir"):
        from testbed.results import rundir
        return getattr(rundir, name)
    if name == "load":
        from testbed.results.rundir import RunDir
        return RunDir.open
    raise AttributeError(f"module 'testbed.results' has no attribute {name!r}")
