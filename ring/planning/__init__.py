"""Planning by measuring, one layer for every backend: the candidates
(:mod:`~ring.planning.candidates`), the timed trial race (:mod:`~ring.planning.race`), the
wisdom store (:mod:`~ring.planning.store`) and its command line
(:mod:`~ring.planning.cli`, ``python -m ring.wisdom``).  A backend supplies only how one
candidate's call is timed and, under MPI, how the ranks agree."""
