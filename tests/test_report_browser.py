"""The report page in headless Chromium, and the report from GPU results made by the
harness's own gpu, nccl and kernel-bw code on the CUDA simulator."""

from __future__ import annotations

import base64
import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from report_helpers import ARTIFACTS, BENCH, close, md_table, size

from ring.report import build_report, collect_inputs

# Slow (tests/tiers.py): headless Chromium and the CUDA simulator.
pytestmark = pytest.mark.slow

# --- the page in a browser ----------------------------------------------------------------


def chromium() -> str:
    for name in (os.environ.get("RING_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.skip("headless Chromium not found (Debian: apt-get install -y chromium)")


def screenshot(browser: str, page: Path, out: Path, profile: Path, height: int):
    """The page as an RGB array, rendered by headless Chromium in a fresh profile."""
    import numpy as np
    from PIL import Image

    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--screenshot={out}",
        f"--window-size=1280,{height}",
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and out.is_file(), done.stderr[-2000:]
    with Image.open(out) as image:
        return np.asarray(image.convert("RGB")).astype(np.int16)


def bands_of(rows, gap: int = 30) -> list[list[int]]:
    """Runs of row indices, joined where they are at most ``gap`` rows apart."""
    bands: list[list[int]] = []
    for y in rows:
        if bands and y - bands[-1][1] <= gap:
            bands[-1][1] = int(y)
        else:
            bands.append([int(y), int(y)])
    return bands


def test_figures_render_in_chromium(built, tmp_path):
    """Screenshot the page, and again with every figure replaced by a white image of the
    same size: the rows that differ are where figures were painted, one band per figure."""
    import numpy as np
    from PIL import Image

    browser = chromium()
    html = built.html.read_text(encoding="utf-8")
    drawn = [f for f in built.figures if f.drawn]
    whites = []
    for figure in drawn:
        with Image.open(figure.png) as image:
            Image.new("RGB", image.size, "white").save(tmp_path / "white.png")
        whites.append(base64.b64encode((tmp_path / "white.png").read_bytes()).decode())
    stand_ins = iter(whites)
    blank_page = tmp_path / "blank.html"
    blank_page.write_text(
        re.sub(
            r"data:image/png;base64,[^\"]+",
            lambda _: f"data:image/png;base64,{next(stand_ins)}",
            html,
        )
    )
    height = 24000
    real = screenshot(browser, built.html, tmp_path / "page.png", tmp_path / "p1", height)
    blank = screenshot(browser, blank_page, tmp_path / "blank.png", tmp_path / "p2", height)

    inked = np.flatnonzero((real < 245).any(axis=(1, 2)))
    assert inked.size, "the page rendered nothing"
    bottom = int(inked[-1]) + 1
    assert bottom < height - 40, "the page is longer than the screenshot; raise its height"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    Image.fromarray(real[: bottom + 20].astype(np.uint8)).save(ARTIFACTS / "report_screenshot.png")

    differs = (np.abs(real - blank) > 24).any(axis=2)
    bands = bands_of(np.flatnonzero(differs.any(axis=1)))
    assert len(bands) == len(drawn), f"figure bands at rows {bands}"
    for (top, end), figure in zip(bands, drawn, strict=True):
        with Image.open(figure.png) as image:
            width, tall = image.size
        shown = end + 1 - top
        # The page scales a figure down to its column, never up; the PNG's white margin
        # does not differ from the white stand-in.
        assert shown <= tall + 2, (figure.spec.name, top, end)
        assert shown >= 0.6 * tall * min(1.0, 1100 / width), (figure.spec.name, top, end)
        painted = differs[top : end + 1].mean()
        assert painted > 0.01, (figure.spec.name, painted)


# --- GPU results: the harness's own gpu, nccl and kernel-bw code on the CUDA simulator ----


@pytest.fixture(scope="session")
def simulated_gpu(results, tmp_path_factory):
    """``results/`` plus gpu/nccl sweeps and a kernel-bw sweep from the harness run on the
    CUDA simulator of ``fakecuda`` (real files, simulated device times)."""
    from fakecuda import FakeCuda, fake_cupy

    import ring.bench.backends.gpu
    import ring.bench.backends.nccl
    import ring.bench.ceilings
    import ring.bench.gpu_ceilings as bench_gpu
    import ring.bench.kernel_bw as kernel_bw
    from ring.bench.__main__ import main as bench_main

    root = tmp_path_factory.mktemp("with_gpu")
    shutil.copytree(results / "cpu", root / "cpu")
    small = 64 << 10  # the simulator moves bytes with NumPy: keep its ceilings small
    patch = pytest.MonkeyPatch()
    for module in (bench_gpu, kernel_bw):
        patch.setattr(module, "ceiling_bytes", lambda max_bytes, itemsize: small)
    patch.setattr(ring.bench.ceilings, "host_array_bytes", lambda: small)
    bench_gpu._ceiling_cache.clear()
    try:
        with fake_cupy(FakeCuda(4, seed=1)):
            for backend in ("gpu", "nccl"):
                for nodes in (2, 4):
                    out = root / "gpu" / f"{backend}_n{nodes}_float32.csv"
                    args = [*BENCH, "--backend", backend, "--nodes", str(nodes), "--out", str(out)]
                    assert bench_main(args) == 0
        with fake_cupy(FakeCuda(1, seed=2)):
            out = root / "gpu" / "kernel_bw_float32.csv"
            assert kernel_bw.main([*BENCH, "--out", str(out)]) == 0
    finally:
        patch.undo()
    return root


def test_gpu_results_on_the_simulator(simulated_gpu, tmp_path):
    chosen = collect_inputs(simulated_gpu)
    assert [p.name for p in chosen["kernel_bandwidth"]] == ["kernel_bw_float32.csv"]
    record = chosen.pop("not_measured")
    result = build_report(
        chosen.pop("runs"),
        **chosen,
        not_measured=record[0] if record else None,
        figures_dir=tmp_path / "figures",
        out_dir=tmp_path / "report",
    )
    assert {"time_vs_size", "busbw"} <= set(result.drawn)
    text = result.appendix.read_text()
    for backend in ("gpu", "nccl"):
        for nodes in (2, 4):
            path = simulated_gpu / "gpu" / f"{backend}_n{nodes}_float32.csv"
            with path.open(newline="") as handle:
                rows = {int(r["bytes"]): r for r in csv.DictReader(handle)}
            name = "gpu ring (CUDA graphs)" if backend == "gpu" else "NCCL"
            block = text.split(f"# {name}, N = {nodes} ({path.stem})")[1].split("# Avg bus")[0]
            lines = [line.split() for line in block.splitlines() if line and line[0] != "#"]
            assert [int(line[0]) for line in lines] == sorted(rows)
            for line in lines:
                assert float(line[8]) == pytest.approx(
                    float(rows[int(line[0])]["time_us"]), abs=0.051
                )

    with (simulated_gpu / "gpu" / "kernel_bw_float32.csv").open(newline="") as handle:
        kernel = list(csv.DictReader(handle))
    table = md_table(text, "Reduction kernel against the device copy (one GPU)")
    assert [shown["kernel"] for shown in table] == ["ring", "ufunc"]  # ours, and CuPy's
    for shown in table:
        last = max(
            (r for r in kernel if r["kernel"] == shown["kernel"]), key=lambda r: int(r["bytes"])
        )
        assert size(shown["largest size"]) == int(last["bytes"])
        assert close(shown["kernel (GB/s)"], float(last["kernel_GBps"]))
    section = text.split("## Not measured")[1].split("## Environment")[0]
    assert "| GPU ring" not in section and "| NCCL allreduce |" not in section


def test_findings_lead_and_profile_tables_fold_in_chromium(built, tmp_path):
    """In the rendered page the findings are painted first, above the quality gate, and in
    the appendix the raw profile tables stay folded until opened."""
    import numpy as np

    browser = chromium()
    html = built.html.read_text(encoding="utf-8")
    appendix = built.appendix.with_name("appendix.html").read_text(encoding="utf-8")
    height = 24000

    def shot(name: str, text: str):
        page = tmp_path / f"{name}.html"
        page.write_text(text, encoding="utf-8")
        return screenshot(browser, page, tmp_path / f"{name}.png", tmp_path / f"p-{name}", height)

    def changed_rows(a, b):
        return np.flatnonzero((np.abs(a - b) > 24).any(axis=(1, 2)))

    real = shot("real", html)
    findings = re.search(r'<ul class="findings">.*?</ul>', html, flags=re.S)
    assert findings and findings.group(0).count("<li>") >= 1
    without = shot("without", html.replace(findings.group(0), '<ul class="findings"></ul>'))
    method = shot("method", html.replace('<h2 id="method">', '<h2 id="method" hidden>'))
    rows = changed_rows(real, without)
    heading = changed_rows(real, method)[0]
    # The findings are painted first, above how they were measured, near the top.
    assert rows.size > 10
    assert rows[0] < heading
    assert rows[0] < 500, "the findings are not near the top of the page"

    real = shot("appendix", appendix)
    first = shot("first", appendix.replace('<h2 id="screens">', '<h2 id="screens" hidden>'))
    heading = changed_rows(real, first)[0]
    folded = appendix.count('<details class="profile-table">')
    assert folded == len(re.findall(r"<summary>", appendix)) and folded >= 1
    opened = shot("opened", appendix.replace('<details class="profile-table">', "<details open>"))
    inked = [np.flatnonzero((img < 245).any(axis=(1, 2)))[-1] for img in (real, opened)]
    # Opening them adds at least a table row per folded table to the page.
    assert inked[1] - inked[0] > 20 * folded
    # Nothing above the profiles changes: the launches and the screens stay put.
    assert changed_rows(real, opened)[0] > heading
