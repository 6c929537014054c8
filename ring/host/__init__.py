"""A plan run on NumPy arrays in one address space: by node and step (:mod:`ring.host.moves`)
or by position (:mod:`ring.host.positions`, :mod:`ring.host.slices`), and a repeated call bound
to its buffers (:mod:`ring.host.bound`).  The cpu backend's threads and MPI's shared buffers
both run it."""
