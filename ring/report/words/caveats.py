"""What a reader must know of the results before any number: wrong elements, runs that
checked nothing, and runs that stopped part-way.  Each is one sentence, or none."""

from __future__ import annotations

from .fmt import format_bytes

__all__ = ["caveats"]


def _partial(run) -> list[str]:
    """A run whose sweep failed part-way (ring.bench, exit 3): what it measured stands, what
    follows was not measured, and no finding is taken from it as complete."""
    partial = run.meta.get("partial")
    if not isinstance(partial, dict):
        return []
    at = partial.get("stopped_at_bytes")
    return [
        f"**Partial run.** Run {run.name} stopped at "
        f"{format_bytes(at) if at else 'its start'} ({partial.get('reason', 'no reason recorded')}"
        "): its sizes from there on were not measured."
    ]


def _shared(model) -> list[str]:
    """What ran on one memory: GPU nodes sharing a device, MPI ranks on buffers every rank
    maps (and where those lived, whether on huge pages)."""
    notes = []
    rows = model.rows
    devices = rows[rows["shared_devices"] & rows["backend"].isin(("gpu", "nccl"))]
    if not devices.empty:
        notes.append(
            "**All logical nodes on one GPU.** "
            + ", ".join(f"`{run}`" for run in sorted(set(devices["run"])))
            + " placed several nodes on one device: their steps are device-local copies, "
            "not peer-to-peer links, so their busbw is no link's bandwidth."
        )
    shared = sorted(set(rows.loc[rows["buffers"] == "shared", "run"]))
    described = []
    for name in shared:
        pages = model.inputs.run_named(name).environment.get("huge_pages") or {}
        if pages.get("directory") is None:
            described.append(f"{name}: not recorded")
            continue
        huge = pages.get("on_directory")
        kind = "not a tmpfs" if huge is None else f"a tmpfs with huge={huge}"
        described.append(f"{name}: {pages['directory']}, {kind}")
    if described:
        notes.append(
            "**Shared buffers.** Series on *shared buffers* kept each rank's buffer in a file "
            f"every rank maps ({'; '.join(described)}): a call runs by position with no "
            "message. Only a tmpfs mounted with huge=always or within_size gives such files "
            "huge pages (docs/api.md, `RING_SHM_DIR`)."
        )
    return notes


def caveats(model) -> list[str]:
    notes = _shared(model)
    rows = model.rows
    wrong = rows[rows["wrong"] > 0] if not rows.empty else rows
    if not wrong.empty:
        points = "; ".join(
            f"{r.label} N={r.nodes} at {format_bytes(r.bytes)}: {r.wrong} wrong"
            for r in wrong.itertuples()
        )
        notes.append(
            f"**Wrong results.** {len(wrong)} point(s) failed validation, so their runs "
            f"failed and their times do not describe a correct allreduce: {points}."
        )
    for run in model.inputs.every_run():
        config = run.meta.get("config") or {}
        if config.get("check") in (0, False):
            notes.append(
                f"Run {run.name} was not validated (`-c 0`): its `wrong` column is 0 "
                "because nothing was checked."
            )
        notes += _partial(run)
    return notes
