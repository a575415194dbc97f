"""The full-size benchmark script runs end to end at tiny scale (the real sizes need a GPU)."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.timeout(180)
def test_fullsize_benchmark_runs_at_tiny_scale(tmp_path):
    out = tmp_path / "rows.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # the GPU-shape accounts at full size (on by default on a CPU) are tested on their own
    # (tests/unit/test_account.py, tests/precompute/test_nemo_account.py): a minute more CPU here
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fullsize",
            "--scale",
            "tiny",
            "--device",
            "cpu",
            "--no-account",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["scale"] == "tiny" and res["device"].startswith("CPU")
    assert res["wall_s"] < 60
    tabs = [row["tab"] for row in res["rows"]]
    # Memorization: one search evaluation alone, one in a batch of selections, then a whole localisation
    assert tabs == ["Relevance", *["Memorization"] * 3, *["Features"] * 3, "Math neurons", "Adapters"]
    for row in res["rows"]:
        assert row["s"] > 0 and row["baseline_s"] > 0 and row["ratio"] == pytest.approx(row["s"] / row["baseline_s"])
    assert "one search evaluation" in res["rows"][1]["what"] and "in a batch" in res["rows"][2]["what"]
    loc = res["rows"][3]  # the batched search found what the sequential one finds
    assert loc["noise_evaluations"] >= 1 and loc["unet_batches"] >= 1 and loc["same_result"] is True
    feats = res["rows"][4]
    assert feats["images_per_s"] > 0 and feats["index_state_gib"] > 0
    contrast, steer = res["rows"][5], res["rows"][6]
    assert contrast["what"].startswith("contrast of 2 × 16 images") and contrast["features_tested"] > 0
    assert 0 < contrast["statistics_s"] < contrast["s"]
    # three clamps and two zeroed features edit where any of the five fires: at least where one does
    assert steer["patches_edited_three"] >= steer["patches_edited_one"] > 0
    assert "| Relevance |" in r.stdout and "ratio" in r.stdout


def test_fullsize_benchmark_rejects_unknown_names():
    r = subprocess.run(
        [sys.executable, "-m", "benchmarks.fullsize", "--only", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "unknown benchmark" in r.stderr
