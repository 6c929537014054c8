"""The nsys stats CSV parser on real output of both report-name generations.

Where each fixture's text came from: tests/fixtures/nsys/README.md.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from ring.nsys import (
    COLUMNS,
    NsysCsvError,
    build_tables,
    calls_by_nodes,
    memop_kind,
    read_report,
    read_tables,
    render_summary,
    split_range,
    write_summary,
    write_tables,
)

FIXTURES = Path(__file__).parent / "fixtures" / "nsys"
GPU2022 = sorted((FIXTURES / "gpu2022").glob("*.csv"))
GPU2023 = sorted((FIXTURES / "gpu2023").glob("*.csv"))
CPU2022 = sorted((FIXTURES / "cpu2022").glob("*.csv"))
CHUNK = 64 * 2**20 // 4  # the gpu2022 fixture's peer-to-peer copies: 16 MiB


def tables_of(paths):
    return build_tables([read_report(path) for path in paths])


def only(rows, **match):
    found = [row for row in rows if all(row[k] == v for k, v in match.items())]
    assert len(found) == 1, (match, found)
    return found[0]


# -- report identification -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "profile", "report", "logical"),
    [
        ("gpu4_gpukernsum.csv", "gpu4", "gpukernsum", "cuda_gpu_kern_sum"),
        ("a_b_cuda_gpu_kern_sum.csv", "a_b", "cuda_gpu_kern_sum", "cuda_gpu_kern_sum"),
        ("x_nvtxppsum.csv", "x", "nvtxppsum", "nvtx_pushpop_sum"),
        ("x_nvtx_pushpop_sum.csv", "x", "nvtx_pushpop_sum", "nvtx_pushpop_sum"),
        ("x_nvtx_sum.csv", "x", "nvtx_sum", "nvtx_sum"),
        ("my_run_cuda_gpu_mem_size_sum.csv", "my_run", "cuda_gpu_mem_size_sum",
         "cuda_gpu_mem_size_sum"),
        ("p_ring_waits.csv", "p", "ring_waits", "ring_waits"),
    ],
)  # fmt: skip
def test_file_names_of_both_generations(tmp_path, name, profile, report, logical):
    path = tmp_path / name
    path.write_text("")
    parsed = read_report(path)
    assert (parsed.profile, parsed.report, parsed.logical) == (profile, report, logical)
    assert parsed.rows == []


def test_unknown_report_file_name(tmp_path):
    path = tmp_path / "prof_gpusum.csv"
    path.write_text("Time (%),Total Time (ns),Instances,Name\n1,2,3,x\n")
    with pytest.raises(NsysCsvError, match=r"prof_gpusum\.csv.*known nsys stats report"):
        read_report(path)


# -- headers -----------------------------------------------------------------------------


def test_unknown_header_names_file_and_columns(tmp_path):
    path = tmp_path / "prof_cuda_gpu_kern_sum.csv"
    path.write_text(
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),"
        "StdDev (ns),Q1 (ns),Name\n1.0,10,1,10.0,10.0,10,10,0.0,10,k\n"
    )
    with pytest.raises(NsysCsvError) as error:
        read_report(path)
    message = str(error.value)
    assert str(path) in message
    assert "'Q1 (ns)'" in message
    assert "columns found: ['Time (%)', 'Total Time (ns)', 'Instances'" in message


def test_header_missing_a_needed_column(tmp_path):
    path = tmp_path / "prof_osrtsum.csv"
    path.write_text("Time (%),Num Calls,Name\n1.0,3,sem_wait\n")
    with pytest.raises(NsysCsvError, match=r"missing \['total_ns'\].*columns found"):
        read_report(path)


def test_row_with_unquoted_comma_is_refused(tmp_path):
    path = tmp_path / "prof_gpukernsum.csv"
    path.write_text(
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),"
        "GridXYZ,BlockXYZ,Name\n"
        "100.0,10,1,10.0,10.0,10,10,0.0,1 1 1,1 1 1,void k(int, int)\n"
    )
    with pytest.raises(NsysCsvError, match="row 2 has 12 fields, the header 11"):
        read_report(path)


def test_time_units_other_than_ns_are_converted(tmp_path):
    path = tmp_path / "prof_osrt_sum.csv"
    path.write_text(
        "Time (%),Total Time (us),Num Calls,Avg (us),Med (us),Min (us),Max (us),"
        "StdDev (us),Name\n100.0,1.5,3,0.5,0.4,0.25,0.85,0.3,sem_wait\n"
    )
    (row,) = read_report(path).rows
    assert row["total_ns"] == 1500
    assert row["min_ns"] == 250
    assert row["count"] == 3


# -- empty files and nsys notes ----------------------------------------------------------


def test_zero_byte_reports_give_no_table(tmp_path):
    # nsys 2022.4 wrote these four as 0 bytes for the CPU run (SKIPPED: no CUDA data).
    gpu_reports = [p for p in CPU2022 if "gpu" in p.name or "cuda" in p.name]
    assert len(gpu_reports) == 4
    assert all(p.stat().st_size == 0 for p in gpu_reports)
    written = write_tables(CPU2022, tmp_path)
    assert set(written) == {"nvtx_ranges", "osrt", "waits"}
    assert not (tmp_path / "kernels.csv").exists()
    assert not (tmp_path / "memops.csv").exists()


def test_skipped_notes_and_progress_lines_are_not_rows(tmp_path):
    # What nsys stats prints when its output is captured instead of written by --output;
    # the lines are those of the run behind cpu2022/.
    path = tmp_path / "cpu_gpukernsum.csv"
    path.write_text(
        "Processing [cpu.sqlite] with [/usr/lib/x86_64-linux-gnu/nsight-systems/"
        "host-linux-x64/reports/gpukernsum.py]... SKIPPED: cpu.sqlite does not contain "
        "CUDA kernel data.\n\nSKIPPED: cpu.sqlite does not contain CUDA kernel data.\n"
    )
    parsed = read_report(path)
    assert parsed.rows == []
    assert parsed.notes == ["SKIPPED: cpu.sqlite does not contain CUDA kernel data."]
    noisy = tmp_path / "run_cuda_gpu_mem_time_sum.csv"
    source = FIXTURES / "gpu2023" / "ikllama1700_cuda_gpu_mem_time_sum.csv"
    noisy.write_text(
        "Processing [profile_report.sqlite] with [/opt/nvidia/nsight-systems/2025.5.2/"
        "host-linux-x64/reports/cuda_gpu_mem_time_sum.py]... \n\n"
        " ** CUDA GPU MemOps Summary (by Time) (cuda_gpu_mem_time_sum):\n\n" + source.read_text()
    )
    assert read_report(noisy).rows == read_report(source).rows


def test_an_nsys_error_in_a_file_is_reported(tmp_path):
    path = tmp_path / "p_nvtx_sum.csv"
    path.write_text("ERROR: Report 'nvtx_sum' could not be found.\n")
    with pytest.raises(NsysCsvError, match="could not be found"):
        read_report(path)


# -- kernels -----------------------------------------------------------------------------


def test_kernels_2022_grid_and_block_columns():
    kernels = tables_of(GPU2022)["kernels"]
    name = "void ring::reduce_chunk<float, ring::Sum>(const float *, float *, unsigned long)"
    assert {row["name"] for row in kernels} == {name}  # the quoted commas stayed inside
    big = only(kernels, grid_xyz="16384x1x1")
    small = only(kernels, grid_xyz="12288x1x1")
    assert big["block_xyz"] == small["block_xyz"] == "256x1x1"
    # make_gpu2022.py: 12 launches per call, 3 calls; (step + node) % 5 == 0 -> small grid
    expected_small = 3 * sum(1 for s in range(3) for n in range(4) if (s + n) % 5 == 0)
    assert small["count"] == expected_small
    assert big["count"] + small["count"] == 36
    assert (big["total_ns"], big["median_ns"], big["min_ns"]) == (509782, 17000.5, 16544)


def test_kernels_2023_without_grid_columns():
    kernels = tables_of(GPU2023)["kernels"]
    row = only(kernels, count=236)
    assert row["name"].startswith("void reduce_1Block_kernel<float, (int)128, (int)7,")
    assert row["grid_xyz"] == row["block_xyz"] == ""
    assert (row["total_ns"], row["median_ns"], row["max_ns"]) == (384132, 1632, 1760)
    assert row["avg_ns"] == pytest.approx(1627.7)


# -- memory operations --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "kind"),
    [
        ("[CUDA memcpy PtoP]", "peer_to_peer"),
        ("[CUDA memcpy Peer-to-Peer]", "peer_to_peer"),
        ("[CUDA memcpy HtoD]", "host_to_device"),
        ("[CUDA memcpy Host-to-Device]", "host_to_device"),
        ("[CUDA memcpy DtoH]", "device_to_host"),
        ("[CUDA memcpy Device-to-Host]", "device_to_host"),
        ("[CUDA memcpy DtoD]", "device_to_device"),
        ("[CUDA memcpy Device-to-Device]", "device_to_device"),
        ("[CUDA memcpy HtoH]", "host_to_host"),
        ("[CUDA memcpy AtoD]", "array_to_device"),
        ("[CUDA Unified Memory memcpy HtoD]", "unified_host_to_device"),
        ("[CUDA memset]", "memset"),
        ("[CUDA memcpy Unknown]", "other"),
        ("cudaMemcpy", "other"),
    ],
)
def test_memop_kinds_of_both_namings(operation, kind):
    assert memop_kind(operation) == kind


def test_memops_2022_ptop_with_sizes():
    memops = tables_of(GPU2022)["memops"]
    peer = only(memops, kind="peer_to_peer")
    assert peer["operation"] == "[CUDA memcpy PtoP]"
    assert peer["count"] == 72  # 3 calls x 2 phases x 3 steps x 4 nodes
    assert peer["total_ns"] == 25371072
    # nsys prints MB (10^6 B) with three decimals: 16.777 MB for a 16 MiB chunk
    assert peer["avg_bytes"] == 16_777_000
    assert abs(peer["avg_bytes"] - CHUNK) < 1000
    assert peer["total_bytes"] == 1_207_960_000
    assert only(memops, kind="memset")["total_bytes"] == 67_109_000
    assert {row["kind"] for row in memops} == {
        "peer_to_peer", "host_to_device", "device_to_device", "memset",
    }  # fmt: skip


def test_memops_2023_peer_to_peer_without_size_report():
    memops = tables_of(GPU2023)["memops"]
    peer = only(memops, profile="ikllama1700", kind="peer_to_peer")
    assert peer["operation"] == "[CUDA memcpy Peer-to-Peer]"
    assert (peer["count"], peer["total_ns"]) == (23895, 7493966990)
    assert peer["total_bytes"] is None  # no cuda_gpu_mem_size_sum in that profile
    vllm = [row for row in memops if row["profile"] == "vllm7599"]
    assert {row["kind"] for row in vllm} == {
        "host_to_device", "device_to_device", "memset", "device_to_host",
    }  # fmt: skip
    assert only(vllm, kind="host_to_device")["count"] == 27260


# -- NVTX ranges ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("ring:allreduce", {"domain": "ring", "kind": "call", "phase": "allreduce"}),
        ("ring:all_gather", {"kind": "call", "phase": "all_gather"}),
        ("ring:reduce_scatter step 2 node 1",
         {"kind": "step", "phase": "reduce_scatter", "step": 2, "node": 1, "rank": ""}),
        ("ring:all_gather step 0 node 3 rank 3",
         {"kind": "step", "phase": "all_gather", "step": 0, "node": 3, "rank": 3}),
        ("reduce_scatter step 2 node 1", {"domain": "", "kind": "other"}),
        ("NCCL:ncclCommInitAll", {"domain": "NCCL", "kind": "other"}),
        ("ring:reduce_scatter step two node 1", {"domain": "ring", "kind": "other"}),
        ("mydomain:inner_step", {"domain": "mydomain", "kind": "other"}),
    ],
)  # fmt: skip
def test_range_names(name, expected):
    parts = split_range(name)
    assert {key: parts[key] for key in expected} == expected


def test_nvtx_2022_gpu_profile_every_step_every_node():
    nvtx = tables_of(GPU2022)["nvtx_ranges"]
    assert only(nvtx, kind="call")["count"] == 3
    steps = [row for row in nvtx if row["kind"] == "step"]
    got = {(r["phase"], r["step"], r["node"]): r["count"] for r in steps}
    expected = {(p, s, n): 3 for p in ("reduce_scatter", "all_gather") for s in range(3)
                for n in range(4)}  # fmt: skip
    assert got == expected
    assert all(row["style"] == "PushPop" and row["wait_ns"] is None for row in nvtx)
    assert calls_by_nodes(steps, "reduce_scatter") == {4: 3}
    assert calls_by_nodes(steps, "all_gather") == {4: 3}


def test_nvtx_pushpop_sum_stands_in_for_nvtx_sum(tmp_path):
    pushpop = [p for p in GPU2022 if "nvtxsum" not in p.name]
    with_sum = tables_of(GPU2022)["nvtx_ranges"]
    without = tables_of(pushpop)["nvtx_ranges"]
    assert without == with_sum


def test_nvtx_sum_from_nsys_notes_keeps_style_and_default_domain():
    nvtx = tables_of([FIXTURES / "nsys_md" / "nsysmd_nvtxsum.csv"])["nvtx_ranges"]
    assert [(r["range"], r["domain"], r["style"], r["count"]) for r in nvtx] == [
        ("mydomain:inner_step", "mydomain", "PushPop", 5),
        ("outer", "", "PushPop", 1),
        ("startend_range", "", "StartEnd", 1),
    ]
    assert all(row["kind"] == "other" for row in nvtx)


def test_cpu_profile_ranges_counts_and_waits():
    tables = tables_of(CPU2022)
    nvtx = tables["nvtx_ranges"]
    assert only(nvtx, kind="call", phase="allreduce")["count"] == 6
    steps = [row for row in nvtx if row["kind"] == "step"]
    # 3 calls on 2 nodes and 3 on 4: step s node i ran in every call with N > max(s+1, i)
    expected = {}
    for nodes, calls in ((2, 3), (4, 3)):
        for phase in ("reduce_scatter", "all_gather"):
            for step in range(nodes - 1):
                for node in range(nodes):
                    key = (phase, step, node)
                    expected[key] = expected.get(key, 0) + calls
    assert {(r["phase"], r["step"], r["node"]): r["count"] for r in steps} == expected
    assert calls_by_nodes(steps, "reduce_scatter") == {2: 3, 4: 3}
    # the waits of ring_waits landed on their ranges
    waits_csv = list(csv.DictReader((FIXTURES / "cpu2022" / "cpu_ring_waits.csv").open()))
    per_range = {}
    for row in waits_csv:
        per_range[row["Range"]] = per_range.get(row["Range"], 0) + int(row["Wait Time (ns)"])
    for row in nvtx:
        assert row["wait_ns"] == per_range.get(row["range"], 0)
        assert row["wait_share"] == pytest.approx(row["wait_ns"] / row["total_ns"], abs=1e-6)
    # pairwise sync: nothing signals a node before its first reduce-scatter step, so no
    # lock wait (sem_wait) can fall into step 0; the GIL (pthread_cond_*) still may
    first = [w for w in tables["waits"] if w["phase"] == "reduce_scatter" and w["step"] == 0]
    assert not [w for w in first if w["function"] == "sem_wait"]
    assert any(w["function"] == "sem_wait" for w in tables["waits"] if w["step"] != "")
    osrt = tables["osrt"]
    assert only(osrt, function="sem_wait")["sync_wait"] is True
    assert only(osrt, function="read")["sync_wait"] is False


def test_osrt_2022_public_output():
    (sem, poll, fflush) = tables_of(sorted((FIXTURES / "osrt2022").glob("*.csv")))["osrt"]
    assert (sem["function"], sem["sync_wait"], sem["count"]) == ("sem_wait", True, 1)
    assert sem["total_ns"] == 10786646470
    assert (poll["function"], poll["sync_wait"], poll["count"]) == ("poll", False, 88)
    assert fflush["total_ns"] == 1042


@pytest.mark.parametrize(
    ("counts", "phase", "expected"),
    [
        ({(0, 0): 5, (0, 1): 5}, "reduce_scatter", {2: 5}),
        ({(s, n): 2 for s in range(2) for n in range(3)}, "reduce_scatter", {3: 2}),
        # 1 call with N = 2 and 2 with N = 5
        ({**{(s, n): 2 for s in range(4) for n in range(5)}, (0, 0): 3, (0, 1): 3},
         "reduce_scatter", {2: 1, 5: 2}),
        ({(0, 0): 2, (0, 1): 1}, "reduce_scatter", None),  # node 1 missed a call
        ({(0, 0): 1, (0, 1): 1, (1, 0): 1}, "reduce_scatter", None),  # step 1 without N=3
        ({}, "reduce_scatter", {}),
        ({(0, 0): 1, (0, 1): 1}, "all_gather", {}),
    ],
)  # fmt: skip
def test_calls_by_nodes(counts, phase, expected):
    rows = [
        {"kind": "step", "phase": "reduce_scatter", "step": s, "node": n, "count": c}
        for (s, n), c in counts.items()
    ]
    assert calls_by_nodes(rows, phase) == expected


# -- the command line and the summary ---------------------------------------------------


def test_cli_tables_any_mix_of_generations(tmp_path):
    files = GPU2022 + GPU2023 + CPU2022 + sorted((FIXTURES / "osrt2022").glob("*.csv"))
    done = subprocess.run(
        [sys.executable, "-m", "ring.nsys", "tables", "--out", str(tmp_path / "t"),
         *map(str, files)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    tables = read_tables(tmp_path / "t")
    for name in ("nvtx_ranges", "memops", "kernels", "osrt", "waits"):
        path = tmp_path / "t" / f"{name}.csv"
        assert path.read_text().splitlines()[0] == ",".join(COLUMNS[name])
        assert all(column == column.lower() and " " not in column for column in COLUMNS[name])
    assert not (tmp_path / "t" / "cuda_api.csv").exists()  # no report had API data
    assert {r["profile"] for r in tables["memops"]} == {"gpu4", "vllm7599", "ikllama1700"}
    assert {r["profile"] for r in tables["kernels"]} == {"gpu4", "ikllama1700"}
    assert {r["profile"] for r in tables["nvtx_ranges"]} == {"gpu4", "ikllama1700", "cpu"}
    assert {r["profile"] for r in tables["osrt"]} == {"cpu", "pytorch111570"}
    peer = [r for r in tables["memops"] if r["kind"] == "peer_to_peer"]
    assert sorted(r["operation"] for r in peer) == [
        "[CUDA memcpy Peer-to-Peer]", "[CUDA memcpy PtoP]",
    ]  # fmt: skip
    # the files hold exactly what the parser built (nothing lost in the CSV round trip)
    assert tables == build_tables([read_report(p) for p in files])


def test_cli_tables_reports_a_bad_file_and_exits_2(tmp_path):
    bad = tmp_path / "p_osrt_sum.csv"
    bad.write_text("Function,Calls\nsem_wait,3\n")
    done = subprocess.run(
        [sys.executable, "-m", "ring.nsys", "tables", "--out", str(tmp_path / "t"), str(bad)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert str(bad) in done.stderr
    assert "columns found: ['Function', 'Calls']" in done.stderr
    assert not (tmp_path / "t").exists()


def test_tables_of_a_previous_run_do_not_linger(tmp_path):
    write_tables(GPU2022, tmp_path)
    assert (tmp_path / "kernels.csv").exists()
    write_tables(CPU2022, tmp_path)
    assert not (tmp_path / "kernels.csv").exists()
    assert (tmp_path / "osrt.csv").exists()


def test_summary_gpu_transfers_per_call(tmp_path):
    write_tables(GPU2022, tmp_path / "tables")
    out = write_summary(tmp_path / "tables", tmp_path / "summary.md")
    text = out.read_text()
    assert "## Profile `gpu4`" in text
    assert "Transfers per call: 24.00 peer-to-peer copies per collective call (3 calls)" in text
    assert "The ring schedule moves 72 chunks for these calls" in text
    assert "peer-to-peer copies counted: 72" in text
    assert "| reduce_scatter | 4 | 3 | 3 | 12 |" in text
    assert "N = 4: an allreduce is 6 steps per node, 24 step transfers in all" in text
    assert "[CUDA memcpy PtoP] | peer_to_peer | 72 |" in text
    assert "(nsys 2022 splits kernels by grid and block size; see kernels.csv.)" in text


def test_summary_cpu_wait_share_and_node_counts(tmp_path):
    write_tables(CPU2022, tmp_path)
    text = render_summary(read_tables(tmp_path))
    assert "| reduce_scatter | 2 | 3 | 1 | 2 |" in text
    assert "| reduce_scatter | 4 | 3 | 3 | 12 |" in text
    assert "N = 4 moves 24 chunks per allreduce against 4 for N = 2" in text
    assert "Wait share over all steps:" in text
    assert "| blocking call inside steps |" in text
    assert "| reduce_scatter | 0 | 4 | 18 |" in text  # step 0 ran on 4 nodes, 18 ranges


def test_summary_of_nothing(tmp_path):
    (tmp_path / "tables").mkdir()
    text = write_summary(tmp_path / "tables", tmp_path / "s.md").read_text()
    assert "No report had data." in text


def test_summary_cli(tmp_path):
    write_tables(GPU2023, tmp_path / "t")
    done = subprocess.run(
        [sys.executable, "-m", "ring.nsys", "summary", str(tmp_path / "t"), "--out",
         str(tmp_path / "s.md"), "--title", "public"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "s.md").read_text()
    assert text.startswith("# public\n")
    assert "[CUDA memcpy Peer-to-Peer] | peer_to_peer | 23895 |" in text
    assert "| NCCL:ncclCommInitAll | 1 |" in text


def test_fixture_readme_names_every_fixture_directory():
    readme = (FIXTURES / "README.md").read_text()
    for folder in FIXTURES.iterdir():
        if folder.is_dir():
            assert f"`{folder.name}/`" in readme, folder.name


def test_summary_puts_profiles_side_by_side(tmp_path):
    write_tables(GPU2022 + CPU2022, tmp_path)
    text = render_summary(read_tables(tmp_path))
    assert "## Profiles side by side" in text
    # gpu4: 24 step ranges and 24 peer-to-peer copies per call, 12 reduction kernels
    assert "| gpu4 | 4 | 3 | 24.00 | 24.00 | 12.00 |  |" in text
    # cpu: (3 x 4 + 3 x 24) / 6 step ranges per call, no GPU reports
    assert "| cpu | 2, 4 | 6 | 14.00 |  |  | " in text
    single = render_summary(read_tables(write_tables(GPU2022, tmp_path / "one")["memops"].parent))
    assert "side by side" not in single


def test_range_waits_are_written_whole_and_empty_when_nothing_waited(tmp_path, monkeypatch):
    from ring.nsys import waits

    rows = [("cpu:allreduce", "node 0", 3, 1200)]
    monkeypatch.setattr(waits, "range_waits", lambda sqlite: rows)
    out = waits.write_range_waits(tmp_path / "p.sqlite", tmp_path / "w" / "waits.csv")
    header = ",".join(waits.WAITS_HEADER)
    assert out.read_bytes() == f"{header}\r\ncpu:allreduce,node 0,3,1200\r\n".encode()
    monkeypatch.setattr(waits, "range_waits", lambda sqlite: [])
    assert waits.write_range_waits(tmp_path / "p.sqlite", out).read_bytes() == b""
    assert [p.name for p in out.parent.iterdir()] == ["waits.csv"]  # no temporary left
