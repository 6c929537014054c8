"""A plan run on NumPy arrays in one address space: by node and step, and a repeated call
bound to its buffers (:mod:`ring.host.moves`), or by position, in slices of tiles
(:mod:`ring.host.positions`).  The cpu backend's threads and MPI's shared buffers both run
it; the reduction itself is :func:`ring.ops.apply`."""
