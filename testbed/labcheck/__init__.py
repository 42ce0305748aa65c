"""Teaching labs' expected figures and their checker (``testbed lab check LAB RESULTS_DIR``).

Each lab folder (``labs/NN_name/``) holds an ``expected.yaml``: every figure its README quotes, where it
is read in a run's results, and its band measured over N fresh runs (``benchmarks/lab_bands.py``).
:mod:`bands` reads and renders that file, :mod:`figures` reads one figure from a run directory,
:mod:`check` judges a student's results directory against the bands.
"""
