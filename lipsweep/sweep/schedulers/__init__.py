"""The scheduler family's Ray side: the Tune adapter that drives a decision core and
:func:`~lipsweep.sweep.schedulers._tune.create_tune_scheduler`, which wraps a member for Tune
(:mod:`lipsweep.sweep.schedulers._tune`). The family's index, the settings, the cores and the
built-ins' factories are Ray-free, in :mod:`lipsweep.search.schedulers`."""
