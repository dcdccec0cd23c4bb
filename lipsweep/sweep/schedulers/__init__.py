"""The scheduler family's Ray side: the Tune adapter that drives a decision core, and the
built-in members' factories (:mod:`lipsweep.sweep.schedulers._tune`). The family's index, the
settings and the cores are Ray-free, in :mod:`lipsweep.search.schedulers`."""
