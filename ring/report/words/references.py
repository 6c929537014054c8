"""Other machines: the committed reference runs, in a section of their own.

Every row names its machine, the date it was measured, the commit it ran and whether that
tree was dirty; nothing here feeds this build's findings, tables or figures.  Runs that
put every logical node on one GPU get a subsection of their own, titled as such: they
measure a schedule on one device's memory, not a ring between devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..derive.original import published
from ..derive.series import label
from ..load import Reference
from .fmt import format_bytes, format_number
from .sources import commit_text
from .table import Table

__all__ = ["Section", "other_machines"]


@dataclass
class Section:
    title: str
    sentences: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


def _when(meta: dict) -> str:
    return str(meta.get("start_time") or "not recorded")[:10]


def _provenance(reference: Reference) -> Table:
    rows = []
    for run in reference.runs:
        env = run.environment
        rows.append(
            [
                f"`{run.name}`",
                reference.machine,
                str(env.get("cpu_model") or "–"),
                ", ".join(sorted({str(b) for b in run.rows["backend"]})),
                ", ".join(str(n) for n in sorted(set(run.rows["nodes"]))),
                _when(run.meta),
                commit_text(run.meta),
            ]
        )
    for kernel in reference.kernels:
        rows.append(
            [
                f"`{kernel.name}`",
                reference.machine,
                "–",
                "kernel bandwidth",
                "1",
                _when(kernel.meta),
                commit_text(kernel.meta),
            ]
        )
    return Table(
        f"{reference.machine}: what the folder holds",
        ["file", "machine", "CPU", "backends", "N", "measured", "commit"],
        rows,
        f"From `{reference.folder}`; its README says how each run was taken.",
    )


def _summary(reference: Reference, shared: bool) -> Table | None:
    rows = []
    for run in reference.runs:
        data = run.rows[(run.rows["shared_devices"] == shared) & (run.rows["bytes"] > 0)]
        keys = ["backend", "sync", "algorithm", "executor", "buffers", "nodes"]
        for _, part in data.groupby(keys, sort=True):
            part = part.sort_values("bytes")
            small, large = part.iloc[0], part.iloc[-1]
            rows.append(
                [
                    label(large.to_dict()),
                    str(int(large["nodes"])),
                    f"{format_bytes(int(small['bytes']))}–{format_bytes(int(large['bytes']))}",
                    format_number(small["time_us"]),
                    format_number(large["time_us"]),
                    format_number(large["busbw_GBps"]),
                    reference.machine,
                    _when(run.meta),
                    commit_text(run.meta),
                ]
            )
    if not rows:
        return None
    title = "every logical node on one GPU" if shared else "series"
    return Table(
        f"{reference.machine}: {title}",
        [
            "series",
            "N",
            "sizes",
            "µs at the smallest",
            "µs at the largest",
            "busbw at the largest (GB/s)",
            "machine",
            "measured",
            "commit",
        ],
        rows,
        "Medians of one run each, on that machine.",
    )


def _kernels(reference: Reference) -> Table | None:
    rows = []
    for kernel in reference.kernels:
        data = kernel.rows.dropna(subset=["kernel_GBps"])
        if data.empty:
            continue
        last = data.loc[data["bytes"].idxmax()]
        rows.append(
            [
                f"`{kernel.name}`",
                format_bytes(int(last["bytes"])),
                format_number(last["kernel_GBps"]),
                format_number(last["copy_GBps"]) if pd.notna(last["copy_GBps"]) else "–",
                reference.machine,
                _when(kernel.meta),
                commit_text(kernel.meta),
            ]
        )
    if not rows:
        return None
    return Table(
        f"{reference.machine}: the reduction kernel alone (not a ring)",
        ["file", "size", "kernel (GB/s)", "device copy (GB/s)", "machine", "measured", "commit"],
        rows,
    )


def other_machines(references: list[Reference]) -> list[Section]:
    """One section per reference folder, and one for runs of every node on one GPU."""
    sections = []
    one_gpu = Section(
        "All logical nodes on one GPU",
        [
            "These runs put every logical node of the GPU ring on one device: each step's "
            "copy and add run in that device's memory and no link between devices is "
            "crossed. They measure the schedule and the kernels, not a multi-GPU ring; "
            "the original study's multi-GPU figures (A100s over NVLink: "
            + "; ".join(
                f"N = {p.nodes}, {format_number(p.busbw)} GB/s busbw at {format_bytes(p.bytes)}"
                for p in published()
                if p.backend == "gpu" and p.busbw
            )
            + ", published) are another measurement."
        ],
    )
    for reference in references:
        section = Section(f"{reference.machine} (committed reference)")
        section.tables.append(_provenance(reference))
        for shared, into in ((False, section), (True, one_gpu)):
            table = _summary(reference, shared)
            if table is not None:
                into.tables.append(table)
        kernels = _kernels(reference)
        if kernels is not None:
            one_gpu.tables.append(kernels)
        if reference.profiles:
            section.sentences.append(
                "Profiles: "
                + ", ".join(f"`{p.name}` ({', '.join(p.tables)})" for p in reference.profiles)
                + "."
            )
        sections.append(section)
    if one_gpu.tables:
        sections.append(one_gpu)
    return sections
