"""The schedule: what moves when, computed once here and executed by every backend.

:func:`plan` gives, for a collective, a node count, a buffer length and an algorithm, every
node's steps with the element ranges already cut (the step shape: :mod:`ring.schedule.steps`;
the ring family in closed form: :mod:`ring.schedule.ring`; the table-built algorithms:
:mod:`ring.schedule.algorithms`; the plan and its options: :mod:`ring.schedule.plans`).
The threaded, CUDA and MPI backends execute nothing else.
"""

from .plans import (
    ALGORITHM_COLLECTIVES,
    ALGORITHM_OPTIONS,
    ALGORITHMS,
    AUTO,
    CACHED_NODES,
    EXECUTORS,
    RING_FAMILY,
    Plan,
    algorithms_of,
    check_algorithm,
    check_algorithm_options,
    chunk_offsets,
    default_group_size,
    default_segment_bytes,
    plan,
    plan_for,
    unit_probe,
)
from .ring import Phase, RingSchedule, Transfer, owned_chunk, ring_chunk, ring_schedule
from .steps import (
    ALL_GATHER,
    COLLECTIVE_PHASES,
    COLLECTIVES,
    PHASES,
    REDUCE_SCATTER,
    Move,
    Send,
    Step,
    check_collective,
    chunk_bounds,
    chunk_range,
)

__all__ = [
    "ALGORITHMS",
    "ALGORITHM_COLLECTIVES",
    "ALGORITHM_OPTIONS",
    "ALL_GATHER",
    "AUTO",
    "CACHED_NODES",
    "COLLECTIVES",
    "COLLECTIVE_PHASES",
    "EXECUTORS",
    "PHASES",
    "REDUCE_SCATTER",
    "RING_FAMILY",
    "Move",
    "Phase",
    "Plan",
    "RingSchedule",
    "Send",
    "Step",
    "Transfer",
    "algorithms_of",
    "check_algorithm",
    "check_algorithm_options",
    "check_collective",
    "chunk_bounds",
    "chunk_offsets",
    "chunk_range",
    "default_group_size",
    "default_segment_bytes",
    "owned_chunk",
    "plan",
    "plan_for",
    "ring_chunk",
    "ring_schedule",
    "unit_probe",
]
