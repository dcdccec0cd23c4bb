"""The search logic, free of Ray, MLflow and torch: the space (parse, sample, record), the
search protocol, the scheduler and searcher families' indexes, settings and decision cores,
and the replay that drives them over a recorded table (``bench-search``). The Ray side,
Tune's adapters and the sweep driver, is :mod:`lipsweep.sweep`."""
