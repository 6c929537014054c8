"""The model's split of a call's time into its terms, and the ways of running a call that
``auto`` does not price (executor=slices, buffers=shared) fitted as groups of their own."""

from __future__ import annotations

import csv
import json
import math

import pytest
from test_model import TRUE, synthetic

from ring.bench.schema import COLUMNS, SCHEMA
from ring.model import predict_seconds
from ring.model.costs import seconds_by_term
from ring.model.data import load_groups
from ring.model.fit import fit_group


@pytest.mark.parametrize("algorithm", ["ring", "recursive-doubling", "reduce-broadcast"])
@pytest.mark.parametrize("inline", [False, True])
def test_the_terms_add_up_to_the_prediction(algorithm, inline):
    parts = seconds_by_term(TRUE, algorithm, 4, 1 << 20, shared=True, inline=inline)
    whole = predict_seconds(TRUE, algorithm, 4, 1 << 20, shared=True, inline=inline)
    assert set(parts) == {"alpha", "beta", "gamma", "per_node"}
    assert sum(parts.values()) == pytest.approx(whole, rel=1e-12)
    assert (parts["per_node"] > 0) == (inline and TRUE.per_node > 0)


def test_small_calls_are_steps_and_large_ones_bytes():
    fit = fit_group(synthetic(["ring", "recursive-doubling", "rabenseifner"], noise=0.01))
    small, large = fit.predict_terms("ring", 4, 1024), fit.predict_terms("ring", 4, 1 << 28)
    assert small["alpha"] / sum(small.values()) > 0.5
    assert (large["beta"] + large["gamma"]) / sum(large.values()) > 0.9
    assert sum(large.values()) == pytest.approx(fit.predict("ring", 4, 1 << 28), rel=1e-12)


def _run(tmp_path, executors):
    """A run of two algorithms by each executor, times of a known α and β (shared bus)."""
    rows = []
    for executor in executors:
        scale = 1.0 if executor == "nodes" else 0.5
        for algorithm in ("ring", "direct", "reduce-broadcast"):
            for exponent in range(10, 24, 2):
                nbytes = 1 << exponent
                t = scale * predict_seconds(TRUE, algorithm, 2, nbytes, shared=True)
                row = dict.fromkeys(COLUMNS, "")
                row.update(backend="cpu", sync="pairwise", algorithm=algorithm, nodes=2)
                row.update(dtype="float32", op="sum", bytes=nbytes, count=nbytes // 4)
                row.update(iters=5, time_us=t * 1e6, executor=executor, wrong=0)
                rows.append(row)
    path = tmp_path / "run.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    path.with_suffix(".json").write_text(json.dumps({"schema": SCHEMA}))
    return path


def test_slices_rows_are_left_out_unless_variants_are_asked_for(tmp_path):
    path = _run(tmp_path, ["nodes", "slices"])
    groups, notes = load_groups([path])
    assert len(groups) == 1 and "executor" not in groups[0].key
    assert any(note.startswith("executor=slices: not fitted") for note in notes)
    groups, notes = load_groups([path], variants=True)
    by_executor = {g.key.get("executor", "nodes"): g for g in groups}
    assert set(by_executor) == {"nodes", "slices"} and not notes
    assert all(g.shared for g in groups)
    fits = {name: fit_group(g, draws=20) for name, g in by_executor.items()}
    for nbytes in (1 << 12, 1 << 20):
        ratio = fits["slices"].predict("ring", 2, nbytes) / fits["nodes"].predict("ring", 2, nbytes)
        assert math.isclose(ratio, 0.5, rel_tol=0.1)
