"""The caveats the data imply, by topic; each returns zero or more sentences."""

from __future__ import annotations

from . import analysis, trust
from .fmt import format_bytes, format_number

__all__ = ["NOISY_SPREAD", "caveats"]

# The harness targets a spread within 10 % of the median on a quiet machine.
NOISY_SPREAD = 0.10


def caveats(model) -> list[str]:
    return [
        *_wrong_results(model),
        *_node_counts(model),
        *_oversubscription(model),
        *_shared_hardware(model),
        *_runs_and_hosts(model),
        *_noise(model),
        *trust.ceiling_notes(model),
        *_unplottable(model),
    ]


def _wrong_results(model) -> list[str]:
    notes = []
    rows = model.rows
    for result in model.inputs.kernel_bandwidth:
        if "wrong" in result.rows and (result.rows["wrong"] > 0).any():
            bad = result.rows[result.rows["wrong"] > 0]
            notes.append(
                f"**Wrong results.** The kernel sweep {result.name} has {len(bad)} size(s) "
                "whose first launch failed validation; its throughput there describes a "
                "wrong kernel."
            )
    wrong = rows[rows["wrong"] > 0]
    if not wrong.empty:
        points = "; ".join(
            f"{r.series} N={r.nodes} at {format_bytes(r.bytes)}: {r.wrong} wrong"
            for r in wrong.itertuples()
        )
        notes.append(
            f"**Wrong results.** {len(wrong)} point(s) failed validation, so their runs "
            f"failed and their times do not describe a correct allreduce: {points}."
        )
    for run in model.inputs.runs:
        config = run.meta.get("config") or {}
        if config.get("check") in (0, False):
            notes.append(
                f"Run {run.name} was not validated (`-c 0`): its `wrong` column is 0 "
                "because nothing was checked."
            )
        notes += _partial(run)
    return notes


def _partial(run) -> list[str]:
    """A run (or a run merged into it) whose sweep failed part-way (ring.bench, exit 3)."""
    stopped = [run.meta, *(run.meta.get("runs") or [])]
    return [
        f"**Partial run.** Run {run.name} stopped at "
        f"{format_bytes(p['stopped_at_bytes']) if p.get('stopped_at_bytes') else 'its start'}"
        f" ({p.get('reason', 'no reason recorded')}): its sizes from there on were not measured."
        for p in (m.get("partial") for m in stopped if isinstance(m, dict))
        if isinstance(p, dict)
    ]


def _node_counts(model) -> list[str]:
    notes = []
    rows = model.rows
    gpu_vs_cpu = model.comparison("gpu_vs_cpu")
    if gpu_vs_cpu is not None and gpu_vs_cpu.cross_nodes:
        pairs = gpu_vs_cpu.table[gpu_vs_cpu.table["nodes_fast"] != gpu_vs_cpu.table["nodes_slow"]][
            ["nodes_fast", "nodes_slow"]
        ].drop_duplicates()
        described = ", ".join(
            f"GPU N={a} with CPU N={b} (busbw factors "
            f"{format_number(analysis.busbw_factor(a))} and "
            f"{format_number(analysis.busbw_factor(b))})"
            for a, b in pairs.itertuples(index=False)
        )
        notes.append(
            "GPU and CPU series were measured at different N, so the GPU/CPU comparison "
            f"pairs {described}: their bandwidths are not comparable, compare wall-clock "
            "time (the speedups here are time ratios)."
        )
    node_sets = rows.groupby("backend")["nodes"].agg(lambda s: tuple(sorted(set(s))))
    if node_sets.nunique() > 1:
        described = "; ".join(
            f"{backend}: N = {', '.join(map(str, counts))}" for backend, counts in node_sets.items()
        )
        notes.append(
            f"Backends were measured at different node counts ({described}); across "
            "different N compare wall-clock time, not busbw."
        )
    return notes


def _oversubscription(model) -> list[str]:
    over = trust.oversubscribed(model.rows)
    if over.empty:
        return []
    described = "; ".join(
        f"{r.series} N={r.nodes} ({format_number(r.threads_per_core)} per core, {r.run})"
        for r in over.itertuples()
    )
    return [
        "**More nodes than cores.** These points ran more threads or ranks than the machine "
        f"has cores: {described}. The operating system time-slices their nodes, so their "
        "times and their scaling with N measure the scheduler as much as the ring; the "
        "scaling table and the figures mark them, and no per-step cost is read from them."
    ]


def _run_named(model, name: str):
    """The input run called ``name`` (a row's ``run``)."""
    return next(r for r in model.inputs.runs if r.name == name)


def _shared_hardware(model) -> list[str]:
    notes = []
    rows = model.rows
    shared = rows[rows["shared_devices"] & rows["backend"].isin(analysis.DEVICE_BACKENDS)]
    if not shared.empty:
        described = []
        for run_name, part in shared.groupby("run"):
            devices = len(_run_named(model, run_name).environment.get("gpus") or [])
            counts = ", ".join(map(str, sorted(set(part["nodes"]))))
            described.append(f"{run_name}: N = {counts} on {devices} GPU(s)")
        notes.append(
            "Series labelled *(shared devices)* ran several logical nodes on one GPU "
            f"({'; '.join(described)}): transfers between nodes on the same device are "
            "device-local copies, not peer-to-peer links, so their busbw is not a link "
            "bandwidth; read them against the device copy ceiling."
        )
    if rows["one_host"].any():
        notes.append(
            "Series labelled *(one host)* ran all MPI ranks on one machine: their messages "
            "went through shared memory, not a network."
        )
    notes.extend(_shared_buffers(model))
    threads = sorted(set(rows["backend"]) & {"cpu", "numpy-direct", "seed-cpp"})
    if threads:
        named = ", ".join(threads[:-1]) + " and " * (len(threads) > 1) + threads[-1]
        notes.append(
            f"{named} run(s) as threads sharing one memory: no link is "
            "involved, so busbw is the nccl-tests formula only; the schedule's memory "
            "traffic against the memory ceiling of the same run (the fastest of its copy, "
            "add and triad kernels) is the honest measure."
        )
    return notes


def _shared_buffers(model) -> list[str]:
    """Where the runs on shared buffers kept them, and whether on huge pages: on the
    reference VM that alone moved their 64-256 MiB calls by up to a fifth."""
    rows = model.rows
    runs = sorted(set(rows.loc[analysis.buffers_of(rows) == "shared", "run"]))
    if not runs:
        return []
    described = []
    for run_name in runs:
        pages = _run_named(model, run_name).environment.get("huge_pages") or {}
        huge = pages.get("on_directory")
        if pages.get("directory") is None:
            described.append(f"{run_name}: not recorded")
            continue
        kind = "not a tmpfs" if huge is None else f"a tmpfs with huge={huge}"
        described.append(f"{run_name}: {pages['directory']}, {kind}")
    return [
        "Series labelled *(shared buffers)* kept each rank's buffer in a file every rank "
        f"maps ({'; '.join(described)}). Only a tmpfs mounted with huge=always or "
        "within_size gives such files huge pages, which NumPy's own arrays get where the "
        "kernel allows; on the 2-core reference VM that alone made 64 and 256 MiB calls "
        "9-21 % faster (docs/api.md, `RING_SHM_DIR`)."
    ]


def _runs_and_hosts(model) -> list[str]:
    notes = []
    # Hosts of different machines may share a name ("vm"): a reference says its machine.
    hosts = {run.machine or str(run.environment.get("host")) for run in model.inputs.runs}
    cross_run = [
        c.name for c in model.comparisons if (c.table["run_fast"] != c.table["run_slow"]).any()
    ]
    if len(hosts) > 1:
        notes.append(
            f"The runs come from different machines ({', '.join(sorted(hosts))}); ratios "
            "between runs of different machines compare machines as well as "
            "implementations, each measured in its own run."
        )
    if cross_run:
        notes.append(
            "Some speedups pair series from different runs "
            f"({', '.join(cross_run)}); absolute times drift between runs on a shared "
            "machine, so these ratios are less certain than those within one run."
        )
    return notes


def _noise(model) -> list[str]:
    rows = model.rows
    noisy = rows[(rows["bytes"] >= 1 << 20) & (rows["time_us"] > 0)]
    spread = (noisy["time_us_p75"] - noisy["time_us_p25"]) / noisy["time_us"]
    noisy = noisy[spread > NOISY_SPREAD]
    if noisy.empty:
        return []
    described = ", ".join(
        f"{series} N={nodes} ({len(part)})"
        for (series, nodes), part in noisy.groupby(["series", "nodes"])
    )
    return [
        f"At 1 MiB and above, {len(noisy)} point(s) have an interquartile spread "
        f"wider than {100 * NOISY_SPREAD:g} % of the median: {described}. "
        "The machine was probably busy; treat those medians with care."
    ]


def _unplottable(model) -> list[str]:
    notes = []
    rows = model.rows
    if not rows[rows["nodes"] == 1].empty:
        notes.append(
            "Rows with N = 1 move no data between nodes: their busbw is 0 by definition "
            "and they are left out of the bandwidth figure."
        )
    if (rows["bytes"] == 0).any():
        notes.append("0-byte rows are in the tables but cannot be drawn on a log size axis.")
    return notes
