"""The names nsys gives: its reports (by generation: ``nvtxsum`` up to 2022,
``nvtx_sum`` from 2023.1 on), and the NVTX range and memory-operation names it records,
read into their parts.  The tool that runs nsys, the CSV readers and the table builders
all read them from here."""

from __future__ import annotations

import re

from .. import nvtx

__all__ = ["REPORTS", "TRACE_REPORTS", "memop_kind", "split_range"]

# Logical report -> (name up to 2022, name from 2023.1 on).  The order is the order of
# the files nsys writes and of the tables the summary shows.
REPORTS: dict[str, tuple[str, str]] = {
    "nvtx_sum": ("nvtxsum", "nvtx_sum"),
    "nvtx_pushpop_sum": ("nvtxppsum", "nvtx_pushpop_sum"),
    "osrt_sum": ("osrtsum", "osrt_sum"),
    "cuda_api_sum": ("cudaapisum", "cuda_api_sum"),
    "cuda_gpu_kern_sum": ("gpukernsum", "cuda_gpu_kern_sum"),
    "cuda_gpu_mem_time_sum": ("gpumemtimesum", "cuda_gpu_mem_time_sum"),
    "cuda_gpu_mem_size_sum": ("gpumemsizesum", "cuda_gpu_mem_size_sum"),
}

# Logical report -> (name up to 2022, name from 2023.1 on), as REPORTS.
TRACE_REPORTS: dict[str, tuple[str, str]] = {
    "cuda_gpu_trace": ("gputrace", "cuda_gpu_trace"),
    "nvtx_gpu_proj_trace": ("nvtxgpuproj", "nvtx_gpu_proj_trace"),
}


def split_range(name: str) -> dict:
    """Domain, kind and (phase, step, node, rank) of an NVTX range name.

    ``ring:reduce_scatter step 2 node 1`` is a step; ``ring:allreduce`` a call; anything
    else (another library's ranges, a bench's own) is ``other``.
    """
    domain, message = "", name
    head, sep, tail = name.partition(":")
    if sep and head and " " not in head:
        domain, message = head, tail
    parts: dict[str, str | int] = {
        "domain": domain,
        "kind": "other",
        "phase": "",
        "step": "",
        "node": "",
        "rank": "",
    }
    if domain != nvtx.DOMAIN:
        return parts
    if message in nvtx.COLLECTIVES:
        parts.update(kind="call", phase=message)
        return parts
    step = nvtx.STEP_RANGE.match(message)
    if step:
        parts.update(
            kind="step",
            phase=step["phase"],
            step=int(step["step"]),
            node=int(step["node"]),
            rank="" if step["rank"] is None else int(step["rank"]),
        )
    return parts


_MEMCPY = re.compile(r"^\[CUDA (?P<unified>Unified Memory )?memcpy (?P<what>[^\]]+)\]$")
_SHORT_KIND = {"H": "host", "D": "device", "A": "array", "P": "peer"}


def memop_kind(operation: str) -> str:
    """``[CUDA memcpy PtoP]`` and ``[CUDA memcpy Peer-to-Peer]`` -> ``peer_to_peer``."""
    operation = operation.strip()
    if operation == "[CUDA memset]":
        return "memset"
    match = _MEMCPY.match(operation)
    if not match:
        return "other"
    what = match["what"].strip()
    short = re.fullmatch(r"([HDAP])to([HDAP])", what)
    if short:
        kind = f"{_SHORT_KIND[short[1]]}_to_{_SHORT_KIND[short[2]]}"
    elif re.fullmatch(r"[A-Za-z]+(-to-[A-Za-z]+)+", what):
        kind = what.lower().replace("-", "_")
    else:
        return "other"
    return ("unified_" if match["unified"] else "") + kind
