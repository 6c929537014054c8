"""What the MPI ranks agree on before any data moves, and the one error they all raise
when they do not.

Every call of :class:`ring.mpi.MpiRing` first exchanges one row per rank
(:mod:`ring.mpi.exchange`):
status, collective, length, dtype, op, buffer kind, segment size, algorithm, group
size, shared allocation (:mod:`ring.mpi.shared`), and how the algorithm was chosen: given,
or ``auto`` by the decision table or by measuring, with the planning budget
(``RING_PLAN_BUDGET``) where it measures.  Every rank sees the same table, so every rank
raises the same error, naming each rank's value, instead of some ranks waiting forever for
a message that never comes: a rank that plans by measuring exchanges messages a rank that
runs a given algorithm (or the table's pick) never sends, and ranks of other budgets would
end their trials on other calls.

Each rank's slot of the exchange also carries its buffer when that is at most
:data:`RIDING_BYTES` (the slot's size is fixed, so the exchange matches whatever the
ranks passed): then ``direct``, and a ``reduce-broadcast`` allreduce, need no other message
(:func:`rides_preflight`, :func:`ring.mpi.steps.compile_gathered`).

What a rank's checks found is a :class:`CallForm`, made once per (collective, op, dtype,
length, options) and kept by the ring: a repeated call is checked by one key lookup and
a few flag tests (:func:`form_key`), and its row is packed already.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ..communicator import validate_buffers
from ..ops import AVERAGING, OPS, resolve_op
from ..planning.candidates import resolve_algorithm
from ..planning.race import BUDGET_ENV, budget_seconds
from ..schedule import ALGORITHMS, AUTO, COLLECTIVES, check_algorithm, check_algorithm_options
from .cuda import device_backend, is_device_array

__all__ = [
    "ALGORITHM_CODE",
    "COLLECTIVE_CODE",
    "ESTIMATE",
    "FIXED",
    "GATHERED_BYTES",
    "MEASURE",
    "OP_CODE",
    "PREFLIGHT_ALGORITHMS",
    "RIDING_BYTES",
    "ROW",
    "ROW_FORMAT",
    "SLOT",
    "SLOT_DATA",
    "STATUS",
    "UNMEASURED",
    "CallForm",
    "agree_on_segment",
    "agreed_exception",
    "check_segment_bytes",
    "check_table",
    "dtype_code",
    "error_row",
    "form_key",
    "local_form",
    "mismatch",
    "pack_row",
    "raise_local_errors",
    "resolve_call",
    "rides_preflight",
    "riding_pick",
    "shared_group_size",
]

_COLLECTIVES = COLLECTIVES
_OP_NAMES = tuple(OPS)
# One row per rank in the pre-flight exchange.
STATUS, _COLLECTIVE, _COUNT, _DTYPE, _OP, _DEVICE, _SEGMENT, _ALGORITHM, _GROUP, _SHARED = range(10)
_PLANNING, _BUDGET = 10, 11
ROW = 12
ROW_FORMAT = struct.Struct(f"<{ROW}q")
pack_row = ROW_FORMAT.pack_into
# How a call's algorithm was chosen (its row's planning column): given; auto by the
# decision table (planning="estimate"); auto by measuring (planning="measure", the ring's
# default); auto on a ring that measures, by the table, for a call measuring does not take
# (not a list of one NumPy array with options of plain types: it has no form key).
FIXED, ESTIMATE, MEASURE, UNMEASURED = range(4)
_PLANNING_SHOWN = {
    ESTIMATE: "planning='estimate'",
    MEASURE: "planning='measure'",
    UNMEASURED: "planning='measure' on a call it does not measure (not [one NumPy array])",
}
# A rank's slot in the pre-flight exchange: its row, padded so the data after it is aligned
# for every dtype, then up to RIDING_BYTES of its buffer.  Up to 64 KiB, one exchange of the
# whole buffer and a local reduction beat any plan's rounds of messages on one host
# (docs/notes/mpi-bound-call.md); above it, moving (N - 1) buffers and reducing them all on
# every rank costs more than the ring's halves.
RIDING_BYTES = 1 << 16
# The size up to which the model (ring.model.data) leaves MPI rows of the riding
# algorithms out of a fit, and auto's tables pick one of them by rule: the runs its
# shipped fits (ring/model/defaults) were measured from rode the exchange up to 1 KiB.
GATHERED_BYTES = 1024
SLOT_DATA = -(-ROW_FORMAT.size // 16) * 16
SLOT = SLOT_DATA + RIDING_BYTES
# The algorithms whose plans a rank can run on every rank's input alone, fewest local
# operations first: a reduce-broadcast allreduce is N - 1 on the whole buffer, direct
# N(N - 1) on chunks.
PREFLIGHT_ALGORITHMS = ("reduce-broadcast", "direct")
COLLECTIVE_CODE = {name: i for i, name in enumerate(_COLLECTIVES)}
ALGORITHM_CODE = {name: i for i, name in enumerate(ALGORITHMS)}
OP_CODE: dict[str | None, int] = {None: -1, **{name: i for i, name in enumerate(_OP_NAMES)}}
_KINDS = ("NumPy", "CuPy")


@lru_cache(maxsize=64)
def dtype_code(dtype: np.dtype) -> int:
    return int.from_bytes(dtype.str.encode("ascii").ljust(8, b"\0")[:8], "little", signed=True)


# The budget's float travels in the row's int64 column, bit for bit.
_BUDGET_FLOAT, _BUDGET_BITS = struct.Struct("<d"), struct.Struct("<q")


def _budget(bits: int) -> float:
    return _BUDGET_FLOAT.unpack(_BUDGET_BITS.pack(int(bits)))[0]


def _dtype_name(code: int) -> str:
    return str(np.dtype(int(code).to_bytes(8, "little", signed=True).rstrip(b"\0").decode()))


def raise_local_errors(comm, table: np.ndarray, error: BaseException | None) -> None:
    """Raise, on every rank, the one error that names the ranks whose input was bad."""
    # Only what every rank knows goes into the message, so all ranks raise the same one.
    # Plain strings travel, not exception objects: one that failed to pickle on a single
    # rank would leave the others waiting in this allgather.
    errors = comm.allgather(
        None if error is None else (str(error), type(error).__module__, type(error).__qualname__)
    )
    failed = [r for r, e in enumerate(errors) if e is not None]
    first = failed[0]
    message, module, qualname = errors[first]
    name = _COLLECTIVES[table[first, _COLLECTIVE]]
    if len(failed) == len(table):
        where = "every rank"
    elif len(failed) > 1:
        where = f"ranks {', '.join(map(str, failed))} (rank {first} says)"
    else:
        where = f"rank {first}"
    raise agreed_exception(
        f"ring.mpi {name}: bad input on {where}: {message}", module, qualname
    ) from error


def agreed_exception(text: str, module: str, qualname: str) -> Exception:
    """The exception every rank raises, of the class ``module.qualname`` one rank's error
    was (where it can be found and made from ``text``), else a RuntimeError naming it:
    ranks exchange an error's text and class name, never the exception object."""
    cls = _exception_class(module, qualname)
    try:
        exc = None if cls is RuntimeError else cls(text)
    except Exception:  # noqa: BLE001 - an exception class with another signature
        exc = None
    if exc is None:
        if f"{module}.{qualname}" != "builtins.RuntimeError":
            text = f"{text} ({module}.{qualname})"
        exc = RuntimeError(text)
    return exc


def _exception_class(module: str, qualname: str) -> type[Exception]:
    """The exception class named ``module.qualname`` if it can be found, else RuntimeError."""
    try:
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return RuntimeError
    return found if isinstance(found, type) and issubclass(found, Exception) else RuntimeError


def check_segment_bytes(segment_bytes: object) -> int:
    if isinstance(segment_bytes, bool) or not isinstance(segment_bytes, (int, np.integer)):
        raise TypeError(f"segment_bytes must be an integer, got {type(segment_bytes).__name__}")
    if not 0 <= segment_bytes < 2**62:
        raise ValueError(f"segment_bytes must be >= 0 and < 2**62, got {segment_bytes}")
    return int(segment_bytes)


def agree_on_segment(comm, segment_bytes: object) -> int:
    """``segment_bytes`` checked on every rank together: the same error everywhere."""
    try:
        value, error = check_segment_bytes(segment_bytes), None
    except (TypeError, ValueError) as exc:
        value, error = None, (type(exc).__name__, str(exc))
    answers = comm.allgather((value, error))
    for rank, (_, bad) in enumerate(answers):
        if bad is not None:
            cls = TypeError if bad[0] == "TypeError" else ValueError
            raise cls(f"ring.mpi: bad segment_bytes on rank {rank}: {bad[1]}")
    values = [v for v, _ in answers]
    if len(set(values)) > 1:
        shown = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
        raise ValueError(f"ring.mpi: segment_bytes differs between ranks ({shown})")
    assert value is not None  # no rank reported an error, this one included
    return value


def mismatch(table: np.ndarray) -> Exception:
    """The one error every rank raises when the ranks' calls disagree."""
    header = "ring.mpi: the ranks' calls do not match, so no data was moved: "

    def per_rank(column: int, show) -> str:
        return ", ".join(f"rank {r}: {show(v)}" for r, v in enumerate(table[:, column]))

    def differs(column: int) -> bool:
        return bool((table[:, column] != table[0, column]).any())

    if differs(_COLLECTIVE):
        shown = per_rank(_COLLECTIVE, lambda v: _COLLECTIVES[v])
        return ValueError(header + f"every rank must call the same collective ({shown})")
    header = f"ring.mpi {_COLLECTIVES[table[0, _COLLECTIVE]]}: " + header[len("ring.mpi: ") :]
    if differs(_DEVICE):
        shown = per_rank(_DEVICE, lambda v: f"{_KINDS[v]} buffer")
        return TypeError(header + f"every rank must pass the same kind of buffer ({shown})")
    if differs(_COUNT):
        shown = per_rank(_COUNT, lambda v: f"{v} elements")
        return ValueError(header + f"buffer lengths differ between ranks ({shown})")
    if differs(_DTYPE):
        shown = per_rank(_DTYPE, _dtype_name)
        return TypeError(header + f"buffer dtypes differ between ranks ({shown})")
    if differs(_OP):
        shown = per_rank(_OP, lambda v: repr(_OP_NAMES[v]) if v >= 0 else "None")
        return ValueError(header + f"ops differ between ranks ({shown})")
    if differs(_PLANNING):
        planning = table[:, _PLANNING]
        if (planning == FIXED).any():  # auto on some ranks, a given algorithm on others
            shown = ", ".join(
                f"rank {r}: {repr(ALGORITHMS[a]) if p == FIXED else repr(AUTO)}"
                for r, (a, p) in enumerate(zip(table[:, _ALGORITHM], planning, strict=True))
            )
            return ValueError(header + f"algorithms differ between ranks ({shown})")
        shown = per_rank(_PLANNING, lambda v: _PLANNING_SHOWN[v])
        return ValueError(header + f"auto plans differently on the ranks ({shown})")
    if differs(_BUDGET):
        shown = per_rank(_BUDGET, lambda v: f"{_budget(v):g} s")
        return ValueError(header + f"{BUDGET_ENV} differs between ranks ({shown})")
    if differs(_ALGORITHM):
        shown = per_rank(_ALGORITHM, lambda v: repr(ALGORITHMS[v]))
        return ValueError(header + f"algorithms differ between ranks ({shown})")
    if differs(_GROUP):
        shown = per_rank(_GROUP, lambda v: str(v) if v else "none")
        return ValueError(header + f"group_size differs between ranks ({shown})")
    if differs(_SHARED):
        shown = per_rank(_SHARED, lambda v: f"shared buffer {v}" if v else "its own buffer")
        return ValueError(
            header + "every rank must pass its array of the same shared_buffer allocation, "
            f"or none may ({shown})"
        )
    shown = per_rank(_SEGMENT, lambda v: f"{v} bytes")
    return ValueError(header + f"segment_bytes differs between ranks ({shown})")


def shared_group_size(comm) -> int:
    """The ranks per host when every host holds the same number of ranks, numbered
    contiguously (``Split_type(COMM_TYPE_SHARED)``): hierarchical's default groups on MPI;
    0 when the hosts' ranks do not form such groups (then ``group_size`` must be given).
    Collective over ``comm``."""
    MPI = importlib.import_module("mpi4py.MPI")
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        size, local_rank = local.Get_size(), local.Get_rank()
    finally:
        local.Free()
    rank = comm.Get_rank()
    fits = rank // size * size == rank - local_rank
    answers = comm.allgather((size, fits))
    sizes = {s for s, _ in answers}
    return size if len(sizes) == 1 and all(ok for _, ok in answers) else 0


def resolve_call(name: str, settings: dict, nodes: int, host_group_size: int) -> tuple:
    """(algorithm, segment_bytes, group_size) of a call, checked on this rank (what goes
    into its pre-flight row): the group size of ``hierarchical`` (else 0) is the host's
    (:func:`shared_group_size`) unless the call gives one."""
    segment = check_segment_bytes(settings["segment_bytes"])
    algorithm = check_algorithm(settings["algorithm"], name)
    group = settings["group_size"]
    if algorithm != "hierarchical":
        if group is not None:
            check_algorithm_options(algorithm, nodes, {"group_size": group})
        return algorithm, segment, 0
    if group is None:
        if not host_group_size:
            raise ValueError(
                "hierarchical: the hosts hold different numbers of ranks, or ranks that "
                "are not numbered contiguously, so pass group_size"
            )
        group = host_group_size
    checked = check_algorithm_options(algorithm, nodes, {"group_size": group})
    return algorithm, segment, checked["group_size"]


class CallForm(NamedTuple):
    """What this rank's checks found for one kind of call, and its pre-flight row."""

    name: str
    op: str | None  # None for all_gather, which reduces nothing
    device: bool
    algorithm: str
    segment: int
    group: int
    average: bool
    gathered: bool  # the buffer travels in the pre-flight exchange (direct, small, host)
    shared: int  # the buffer's shared allocation (ring.mpi.shared), 0 for none
    budget: float  # the planning budget of a call that measures (0 for others)
    row: bytes  # this rank's pre-flight row
    table: bytes  # the pre-flight table when every rank's row is this one


_PLAIN_OPTION = (int, type(None))


def rides_preflight(name: str, algorithm: str) -> bool:
    """Whether every copy of this plan takes a range its owner's input holds or one rank
    completes whole (what :func:`ring.mpi.steps.compile_gathered` computes from the
    exchanged inputs): every collective of ``direct``, the allreduce of
    ``reduce-broadcast`` (whose scatter and all-gather copy parts of node 0's result)."""
    return algorithm == "direct" or (algorithm == "reduce-broadcast" and name == "allreduce")


def riding_pick(name: str, nodes: int, nbytes: int) -> str | None:
    """``auto``'s pick for a host call of ``nbytes`` per rank that can ride the exchange
    (at most :data:`RIDING_BYTES`, more than one rank): the riding algorithm of fewest
    local operations, as the tables' own rule picks up to the size they were made with.
    One exchange and a local reduction beat any plan's rounds there
    (docs/notes/mpi-bound-call.md); None elsewhere (the table and measuring decide)."""
    if nodes > 1 and 0 < nbytes <= RIDING_BYTES:
        for algorithm in PREFLIGHT_ALGORITHMS:
            if rides_preflight(name, algorithm):
                return algorithm
    return None


def form_key(name: str, buffers, op, settings: tuple, shared: int = 0) -> tuple | None:
    """The key of a NumPy call's :class:`CallForm`, or None when the call needs the full
    checks: only a plain one-buffer list, an aligned, writeable, one-dimensional array and
    options of plain types (``True`` is no segment size) can reuse a form."""
    if type(buffers) is not list or len(buffers) != 1:
        return None
    buf = buffers[0]
    if type(buf) is not np.ndarray or buf.ndim != 1:
        return None
    flags = buf.flags
    if not (flags.c_contiguous and flags.writeable):
        return None
    segment, algorithm, group = settings
    if type(segment) is not int or type(algorithm) is not str or type(group) not in _PLAIN_OPTION:
        return None
    if op is not None and type(op) is not str:
        return None
    return name, op, buf.dtype, buf.shape[0], settings, shared


def _own_buffer(buffers) -> tuple[Any, bool]:
    """(this rank's buffer, whether it is a device array) of ``[buf]``; raises otherwise."""
    if is_device_array(buffers) or isinstance(buffers, np.ndarray):
        raise TypeError("pass this rank's buffer in a list: [buf]")
    device = False
    if isinstance(buffers, Sequence) and not isinstance(buffers, (str, bytes)):
        if len(buffers) != 1:
            raise ValueError(
                f"the MPI backend takes one buffer per rank ([buf]), got {len(buffers)}"
            )
        device = is_device_array(buffers[0])
    if device:
        validate_buffers(buffers, array_type=device_backend()[1], kind="CuPy")
    else:
        validate_buffers(buffers)
    return buffers[0], device


def local_form(
    name: str,
    buffers,
    op,
    settings: tuple,
    nodes: int,
    host_group_size: int,
    shared: int = 0,
    planning: int = FIXED,
):
    """``(buffer, form)`` of a call that passes this rank's checks; raises otherwise.
    ``shared``: the number of the shared allocation ``buffers[0]`` is (0: none);
    ``planning``: how the call's algorithm was chosen (:data:`FIXED`, ...): a call that
    measures (:data:`MEASURE`, its trial's calls and its plan's too) reads the planning
    budget here, so a bad one is this rank's bad input, raised on every rank."""
    segment_bytes, algorithm, group_size = settings
    algorithm, segment, group = resolve_call(
        name,
        {"segment_bytes": segment_bytes, "algorithm": algorithm, "group_size": group_size},
        nodes,
        host_group_size,
    )
    budget = budget_seconds() if planning == MEASURE else 0.0
    buf, device = _own_buffer(buffers)
    if algorithm == AUTO:  # the size is known now; every rank's row then names the pick
        algorithm, segment, group = resolve_call(
            name,
            {
                "segment_bytes": segment_bytes,
                "algorithm": (None if device else riding_pick(name, nodes, buf.nbytes))
                or resolve_algorithm("mpi", name, nodes, buf.nbytes, AUTO),
                "group_size": group_size,
            },
            nodes,
            host_group_size,
        )
    if name != "all_gather":
        resolve_op(op, buf.dtype)  # all_gather reduces nothing; the others need an op
    else:
        op = None
    row = bytearray(ROW_FORMAT.size)
    pack_row(
        row,
        0,
        0,
        COLLECTIVE_CODE[name],
        buf.shape[0],
        dtype_code(buf.dtype),
        OP_CODE[op],
        int(device),
        segment,
        ALGORITHM_CODE[algorithm],
        group,
        shared,
        planning,
        _BUDGET_BITS.unpack(_BUDGET_FLOAT.pack(budget))[0],
    )
    average = op in AVERAGING
    row_bytes = bytes(row)
    gathered = rides_preflight(name, algorithm) and not device and buf.nbytes <= RIDING_BYTES
    form = CallForm(
        name,
        op,
        device,
        algorithm,
        segment,
        group,
        average,
        gathered,
        shared,
        budget,
        row_bytes,
        row_bytes * nodes,
    )
    return buf, form


def error_row(name: str) -> bytes:
    """The pre-flight row of a rank whose checks failed."""
    row = bytearray(ROW_FORMAT.size)
    pack_row(row, 0, 1, COLLECTIVE_CODE[name], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    return bytes(row)


def check_table(comm, rows: np.ndarray, form: CallForm | None, error) -> None:
    """Raise, on every rank alike, when the pre-flight rows (an (N, ROW_FORMAT.size) view
    of the exchange's slots) are not every rank's ``form``."""
    table = rows.tobytes()
    if error is None and form is not None and table == form.table:
        return
    rows = np.frombuffer(table, dtype=np.int64).reshape(-1, ROW)
    if rows[:, STATUS].any():
        raise_local_errors(comm, rows, error)
    raise mismatch(rows)
