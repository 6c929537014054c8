"""Finding nsys, its report-name generation, the command lines, and the no-nsys message."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ring.nsys import (
    GpuNotFoundError,
    NsysError,
    NsysNotFoundError,
    detect_nsys,
    export_stats,
    profile_command,
    profile_paths,
    report_names,
    require_gpus,
    require_nsys,
    stats_command,
)
from ring.nsys.tool import generation_from_reports

# The first lines of `nsys stats --help-reports` of Debian's 2022.4.2.1 (this project's
# machine) and the report list of a 2023+ nsys as the names in NSYS.md give it.
HELP_2022 = """
The following built-in reports are available:

  apigpusum[:base|:mangled] -- API & GPU Summary (CUDA API + kernels + mem ops)
  cudaapisum -- CUDA API Summary
  gpukernsum[:base|:mangled] -- CUDA GPU Kernel Summary
  gpumemsizesum -- GPU Memory Operations Summary (by Size)
  gpumemtimesum -- GPU Memory Operations Summary (by Time)
  nvtxppsum -- NVTX Push/Pop Range Summary
  nvtxsum -- NVTX Range Summary
  osrtsum -- OS Runtime Summary

For more information, use '--help-reports <report_name>'
"""
NAMES_2023 = [
    "cuda_api_sum", "cuda_gpu_kern_sum", "cuda_gpu_mem_size_sum", "cuda_gpu_mem_time_sum",
    "nvtx_pushpop_sum", "nvtx_sum", "osrt_sum",
]  # fmt: skip


def fake_nsys(
    folder: Path, version: str, reports: list[str], stats_output: str = "", importer: bool = True
) -> Path:
    """A stand-in ``nsys`` that answers --version, --help-reports and stats like nsys,
    with (``importer``) a QdstrmImporter where nsys looks for it: ``../host-linux-x64/``."""
    folder.mkdir(parents=True, exist_ok=True)
    if importer:
        host = folder.parent / "host-linux-x64"
        host.mkdir(exist_ok=True)
        (host / "QdstrmImporter").write_text("#!/bin/sh\nexit 0\n")
    listing = "\n".join(f"  {name} -- report" for name in reports)
    script = folder / "nsys"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = --version ]; then echo "NVIDIA Nsight Systems version {version}"; '
        "exit 0; fi\n"
        f'if [ "$2" = --help-reports ]; then printf "%s\\n" "{listing}"; exit 0; fi\n'
        f'if [ "$1" = stats ]; then echo "$@" > "{folder}/stats_args"; '
        f'printf "%s\\n" "{stats_output}"; exit 0; fi\n'
        "exit 3\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_generation_from_help_reports():
    assert generation_from_reports(HELP_2022) == "2022"
    assert generation_from_reports("\n".join(f"  {n} -- x" for n in NAMES_2023)) == "2023"
    assert generation_from_reports("nothing useful") is None


def test_report_names_of_both_generations():
    assert report_names("2022") == {
        "nvtx_sum": "nvtxsum",
        "nvtx_pushpop_sum": "nvtxppsum",
        "osrt_sum": "osrtsum",
        "cuda_api_sum": "cudaapisum",
        "cuda_gpu_kern_sum": "gpukernsum",
        "cuda_gpu_mem_time_sum": "gpumemtimesum",
        "cuda_gpu_mem_size_sum": "gpumemsizesum",
    }
    assert sorted(report_names("2023").values()) == NAMES_2023
    with pytest.raises(ValueError, match="unknown nsys generation"):
        report_names("2021")


def test_detects_a_2023_nsys_from_its_report_list(tmp_path):
    nsys = fake_nsys(tmp_path / "bin", "2024.5.1.113-245134619542v0", NAMES_2023)
    info = detect_nsys(str(nsys))
    assert (info.version, info.generation) == ("2024.5.1.113", "2023")
    argv = stats_command("r.nsys-rep", "out/p", info)
    assert argv[argv.index("--report") + 1].split(",") == [
        "nvtx_sum", "nvtx_pushpop_sum", "osrt_sum", "cuda_api_sum", "cuda_gpu_kern_sum",
        "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
    ]  # fmt: skip
    assert argv[argv.index("--report") + 2 :] == [
        "--format", "csv", "--output", "out/p", "--force-export=true",
        "--force-overwrite=true", "r.nsys-rep",
    ]  # fmt: skip


def test_version_decides_when_the_report_list_does_not(tmp_path):
    assert (
        detect_nsys(str(fake_nsys(tmp_path / "a", "2023.2.3.1001-32894139v0", []))).generation
        == "2023"
    )
    assert (
        detect_nsys(str(fake_nsys(tmp_path / "b", "2022.1.3.3-1c7b5f7", []))).generation == "2022"
    )


def test_reports_this_nsys_lacks_are_not_asked_for(tmp_path):
    names = [n for n in NAMES_2023 if n != "nvtx_pushpop_sum"]
    info = detect_nsys(str(fake_nsys(tmp_path, "2025.1.1", names)))
    argv = stats_command("r", "p", info)
    assert "nvtx_pushpop_sum" not in argv[argv.index("--report") + 1]


def test_unknown_report_exits_0_but_is_an_error(tmp_path):
    # nsys prints this and exits 0 when asked for a report it does not have (NSYS.md).
    nsys = fake_nsys(
        tmp_path / "bin", "2023.4.1", NAMES_2023, "ERROR: Report 'nvtx_sum' could not be found."
    )
    rep = tmp_path / "r.nsys-rep"
    rep.write_bytes(b"")
    with pytest.raises(NsysError, match="could not be found"):
        export_stats(rep, tmp_path / "stats" / "r", nsys=str(nsys))
    args = (tmp_path / "bin" / "stats_args").read_text()
    assert "--force-export=true --force-overwrite=true" in args


def test_export_stats_needs_the_report(tmp_path):
    with pytest.raises(FileNotFoundError, match="no Nsight Systems report"):
        export_stats(tmp_path / "missing.nsys-rep", tmp_path / "p")


def test_profile_command_cpu_and_gpu():
    bench = [sys.executable, "-m", "ring.bench", "-b", "64M", "-e", "64M", "--nodes", "4"]
    cpu = profile_command("cpu", bench)
    assert cpu == [
        "nsys", "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
        "-o", "results/profiles/cpu/cpu", "--force-overwrite", "true", *bench,
    ]  # fmt: skip
    gpu = profile_command("4gpu", bench, gpu=True, root="out", nsys="/opt/nsys")
    assert gpu[:3] == ["/opt/nsys", "profile", "--trace=cuda,nvtx,osrt"]
    assert gpu[gpu.index("-o") + 1] == os.path.join("out", "4gpu", "4gpu")
    with pytest.raises(ValueError, match="non-empty list"):
        profile_command("cpu", "python -m ring.bench")
    with pytest.raises(ValueError, match="plain file name"):
        profile_command("../cpu", bench)


def test_profile_paths():
    paths = profile_paths("2gpu", "results/profiles")
    assert paths["report"] == Path("results/profiles/2gpu/2gpu.nsys-rep")
    assert paths["stats_prefix"] == Path("results/profiles/2gpu/stats/2gpu")
    assert paths["summary"] == Path("results/profiles/2gpu/summary.md")


# -- without nsys -------------------------------------------------------------------------


def test_no_nsys_on_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("RING_NSYS_SEARCH", "")  # nor in Nsight Compute's or CUDA's folders
    monkeypatch.delenv("NSYS", raising=False)
    assert detect_nsys() is None
    with pytest.raises(NsysNotFoundError) as error:
        require_nsys()
    message = str(error.value)
    assert "\n" not in message
    assert "nsys" in message and "scripts/install_nsys.sh" in message


def run_cli(args, path: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NSYS"}
    env["PATH"] = path
    env["RING_NSYS_SEARCH"] = ""
    return subprocess.run(
        [sys.executable, "-m", "ring.nsys", *args],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip


def test_cli_without_nsys_says_how_to_install_in_one_line(tmp_path):
    for args in (
        ["check"],
        ["stats", str(tmp_path), "--prefix", str(tmp_path / "p")],
        ["profile", "--name", "cpu", "--root", str(tmp_path / "r"), "--", "true"],
    ):
        if args[0] == "stats":
            (tmp_path / "r.nsys-rep").write_bytes(b"")
            args[1] = str(tmp_path / "r.nsys-rep")
        done = run_cli(args, str(tmp_path / "empty"))
        assert done.returncode == 1, (args, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "nsys" in lines[0] and "scripts/install_nsys.sh" in lines[0]
    assert not (tmp_path / "r").exists()  # nothing was run or written


def test_gpu_profile_without_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    with pytest.raises(GpuNotFoundError) as error:
        require_gpus(2, "profile nsys_2gpu")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("profile nsys_2gpu needs 2 CUDA GPU(s), found 0")


def test_cli_gpu_profile_without_gpus_stops_before_running(tmp_path):
    nsys = fake_nsys(tmp_path / "bin", "2022.4.2.1", [])
    done = run_cli(
        ["profile", "--name", "2gpu", "--gpus", "2", "--root", str(tmp_path / "r"),
         "--nsys", str(nsys), "--", "true"],
        str(tmp_path / "bin"),
    )  # fmt: skip
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert "needs 2 CUDA GPU(s), found 0" in done.stderr
    assert not (tmp_path / "r").exists()
    assert not (tmp_path / "bin" / "stats_args").exists()


@pytest.mark.skipif(detect_nsys() is None, reason="nsys not installed (scripts/install_nsys.sh)")
def test_cli_check_with_nsys():
    done = run_cli(["check"], os.environ["PATH"])
    assert done.returncode == 0, done.stderr
    info = detect_nsys()
    assert done.stdout.startswith(f"nsys usable: nsys {info.version} at {info.path}")
    assert f"report names of the {info.generation} generation" in done.stdout


# -- the nsys inside Nsight Compute, and its importer ----------------------------------------


def nsight_compute_layout(root: Path, version: str = "2025.3.1") -> Path:
    """Nsight Compute's tree as on the H200 machine: nsys in host/target-linux-x64, its
    importer in host/linux-desktop-glibc_2_11_3-x64, no host/host-linux-x64."""
    host = root / "opt" / "nvidia" / "nsight-compute" / version / "host"
    nsys = fake_nsys(host / "target-linux-x64", f"{version}.0", NAMES_2023, importer=False)
    desktop = host / "linux-desktop-glibc_2_11_3-x64"
    desktop.mkdir()
    (desktop / "QdstrmImporter").write_text("#!/bin/sh\nexit 0\n")
    return nsys


def test_nsys_inside_nsight_compute_is_found_and_its_importer_link_named(tmp_path, monkeypatch):
    from ring.nsys.tool import find_nsys, importer_problems

    older = nsight_compute_layout(tmp_path, "2024.1.0")
    newest = nsight_compute_layout(tmp_path, "2025.3.1")
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    pattern = str(tmp_path / "opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys")
    assert find_nsys(patterns=(pattern,)) == str(newest) != str(older)
    assert find_nsys("nsys", patterns=(pattern,)) is None  # a name given is not searched
    (problem,) = importer_problems(str(newest))
    host = newest.parent.parent
    assert problem.endswith(
        f"ln -sfn {host / 'linux-desktop-glibc_2_11_3-x64'} {host / 'host-linux-x64'}"
    )
    (host / "host-linux-x64").symlink_to(host / "linux-desktop-glibc_2_11_3-x64")
    assert importer_problems(str(newest), ldd="/bin/true") == ()


def test_missing_importer_libraries_are_named_with_the_recipe(tmp_path):
    from ring.nsys.tool import importer_problems, missing_libraries

    ldd_output = (
        "\tlinux-vdso.so.1 (0x00007ffc)\n"
        "\tlibdw.so.1 => not found\n"
        "\tlibelf.so.1 => not found\n"
        "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n"
    )
    assert missing_libraries(ldd_output) == ["libdw.so.1", "libelf.so.1"]
    nsys = fake_nsys(tmp_path / "target-linux-x64", "2025.3.1.0", NAMES_2023)
    ldd = tmp_path / "ldd"
    ldd.write_text(f"#!/bin/sh\nprintf '{ldd_output}'\n")
    ldd.chmod(0o755)
    (problem,) = importer_problems(str(nsys), ldd=str(ldd))
    assert "lacks libdw.so.1, libelf.so.1" in problem
    assert "apt-get download libdw1 libelf1" in problem and "LD_LIBRARY_PATH" in problem


def test_check_and_profile_stop_on_a_broken_importer_before_running(tmp_path, monkeypatch):
    nsys = nsight_compute_layout(tmp_path)
    for argv in (["check"], ["profile", "--name", "x", "--root", str(tmp_path), "--", "true"]):
        done = subprocess.run(
            [sys.executable, "-m", "ring.nsys", *argv, "--nsys", str(nsys)]
            if argv == ["check"]
            else [sys.executable, "-m", "ring.nsys", *argv[:5], "--nsys", str(nsys), *argv[5:]],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 1, done.stderr
        assert "cannot import its captures" in done.stderr and "ln -sfn" in done.stderr
    assert not (tmp_path / "x").exists()


def test_overhead_says_in_one_line_which_run_failed(monkeypatch, capsys, tmp_path):
    """A bench run that fails (here: an option ring.bench refuses, passed through) ends
    ``python -m ring.nsys.overhead`` with exit 1 and the command that failed, no traceback."""
    from types import SimpleNamespace

    from ring.nsys import overhead

    found = SimpleNamespace(path="nsys", version="2024.1")  # nsys is not run: the plain run fails
    monkeypatch.setattr(overhead, "require_nsys", lambda: found)
    code = overhead.main(["--size", "1K", "--nodes", "2", "--workdir", str(tmp_path), "--bogus"])
    said = capsys.readouterr().err
    assert code == 1
    assert "ring.bench" in said and "exited 2" in said and "Traceback" not in said


def test_overhead_refuses_an_unwritable_json_before_any_run(monkeypatch, capsys, tmp_path):
    from ring.nsys import overhead

    ran = []
    monkeypatch.setattr(overhead, "measure_overhead", lambda *a, **k: ran.append(a))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert overhead.main(["--json", str(blocker / "overhead.json")]) == 2
    said = capsys.readouterr().err
    assert not ran and said.count("\n") == 1 and "not a folder" in said
