"""Results of a run. ``testbed.results.load(run_dir)``: its tables as DataFrames (testbed.results.loader)."""


def __getattr__(name):  # lazy: importing a results module does not import the loader
    if name in ("load", "RunTables", "TableError"):
        from testbed.results import loader
        return getattr(loader, name)
    raise AttributeError(f"module 'testbed.results' has no attribute {name!r}")
