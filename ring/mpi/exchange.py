"""The pre-flight exchange: every rank's row (:mod:`ring.mpi.agree`), and a small call's
buffer with it, sent to every other rank by persistent point-to-point requests.

Each rank sends one message to every peer and receives one from every peer, whatever
call it is making: its row, then its buffer where the call rides the exchange
(:func:`ring.mpi.agree.rides_preflight`, at most :data:`ring.mpi.agree.RIDING_BYTES`).
Every receive is a whole slot, so no message is ever longer than the receive it meets,
whatever the ranks passed: a rank whose call differs in length, dtype, op or algorithm
still completes the exchange, and every rank then holds every rank's row and raises the
same error before anything is accumulated (the buffers land in the slots, not in place).
For a call that rides it, the exchange *is* the algorithm's one round of messages: the
fingerprint travels in band, and nothing else is sent.

The requests are made once: the receives with the ring, the sends per message length
(kept, :data:`_KEPT` lengths at most).  An exchange is then two calls, ``Startall`` and
``Waitall``, with nothing allocated.  Its messages take their own tag, so they never
match a program's.
"""

from __future__ import annotations

import numpy as np

__all__ = ["TAG", "Exchange"]

# The programs' messages (ring.mpi.steps) take tag 0.
TAG = 1
# Send lengths kept per ring: a sweep's small sizes, each of N - 1 requests.
_KEPT = 64


class Exchange:
    """One ring's pre-flight exchange: ``table`` holds every rank's slot (``slot``, this
    rank's, is its row of it), filled by :meth:`run`.  ``generation`` changes when kept
    requests are freed: a bound call holding requests of an older one makes them again."""

    def __init__(self, comm, rank: int, nodes: int, slot_bytes: int, mpi):
        self.table = np.zeros((nodes, slot_bytes), dtype=np.uint8)
        self.slot = self.table[rank]
        self.generation = 0
        self._comm, self._byte = comm, mpi.BYTE
        self._start, self._wait = mpi.Prequest.Startall, mpi.Request.Waitall
        self._peers = [j for j in range(nodes) if j != rank]
        self._receives = [comm.Recv_init([self.table[j], mpi.BYTE], j, TAG) for j in self._peers]
        self._kept: dict[int, list] = {}

    def requests(self, nbytes: int) -> list:
        """The persistent requests of an exchange sending the slot's first ``nbytes``."""
        kept = self._kept.get(nbytes)
        if kept is None:
            if len(self._kept) >= _KEPT:
                self._free_sends()
            sends = [
                self._comm.Send_init([self.slot[:nbytes], self._byte], j, TAG) for j in self._peers
            ]
            kept = self._kept[nbytes] = self._receives + sends
        return kept

    def run(self, nbytes: int) -> None:
        """Send the slot's first ``nbytes`` to every peer; receive every peer's slot."""
        requests = self.requests(nbytes)
        if requests:
            self._start(requests)
            self._wait(requests)

    def starter(self, nbytes: int):
        """``(start, wait, requests)`` of :meth:`run` for a bound call to keep."""
        return self._start, self._wait, self.requests(nbytes)

    def _free_sends(self) -> None:
        for requests in self._kept.values():
            for request in requests[len(self._receives) :]:
                request.Free()
        self._kept = {}
        self.generation += 1

    def free(self) -> None:
        """Free every request (before the communicator is freed)."""
        self._free_sends()
        for request in self._receives:
            request.Free()
        self._receives = []
