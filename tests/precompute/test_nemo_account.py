"""The GPU-shape account of NeMo's search (benchmarks/nemo_account.py) runs on the meta device and
reports its fields: checked at the tiny UNet's shape (the full SD-1.4 run takes ~40 s, printed by
`python -m benchmarks.fullsize`)."""

import math

import pytest
import torch

from benchmarks.nemo_account import H200_OLD, account_nemo, localisation, schedule_length


@pytest.fixture(scope="module")
def rows():
    torch.set_num_threads(1)
    return account_nemo("tiny")


def test_nemo_account_rows_report_each_path_against_one_forward(rows):
    before, now, batch = rows
    assert [r["tab"] for r in rows] == ["Memorization"] * 3
    assert "before" in before["what"] and "now" in now["what"] and "batch of" in batch["what"]
    fwd = now["baseline_account"]
    assert before["baseline_account"] == fwd and fwd["syncs"] == 0 and fwd["d2h"] == 0
    # before: ε copied to the host (2 seeds × 4 × 8 × 8 float32), two syncs per hook's range check
    # (the tiny UNet's 2 value layers: min and max) and the copy's; the SSIM on the host, timed
    assert before["value_layers"] == 2
    assert before["account"]["d2h_bytes"] == 2 * 4 * 8 * 8 * 4
    assert before["account"]["syncs"] == 2 * 2 + 1
    assert before["account"]["host_compute_s"] > 0
    # now: one scalar per evaluation back and the one sync that reads it
    assert now["account"]["syncs"] == 1 and now["account"]["d2h_bytes"] == 4
    # a batch of G selections is one UNet forward of G times the samples: G scalars back
    g = batch["groups"]
    assert g == 16  # meta counts as a GPU: the pixel budget at 2 seeds of 8 × 8 latents, capped at 16
    assert batch["account"]["matmul_flops"] == pytest.approx(g * now["account"]["matmul_flops"], rel=0.01)
    assert batch["account"]["d2h_bytes"] == 4 * g and batch["account"]["syncs"] == 1
    assert batch["account"]["kernels"] < now["account"]["kernels"] + 10
    for r in rows:
        assert r["projected_s"] > 0 and r["projected_ratio"] == pytest.approx(
            r["projected_s"] / r["baseline_projected_s"]
        )
    assert batch["projected_ratio_per_evaluation"] == pytest.approx(batch["projected_ratio"] / g)
    assert before["measured_h200_ratio_old_code"] == H200_OLD["ratio"]
    assert before["device_projected_ratio"] < before["projected_ratio"]  # the host work is in the total
    loc = batch["localisation"]
    assert loc["unet_batches_lower_bound"] == 2 + sum(math.ceil(n / g) for n in (16, 7, 1120 - 24))
    assert loc["projected_s_lower_bound"] > 0
    # the GPU's measured forwards and host calibrate SD-1.4's full shape only
    assert "measured_rate_batch_s" not in loc and loc["host_scale"] == 1.0
    assert any("localisation of the benchmark's prompt (projection)" in line for line in batch["lines"])


def test_fullsize_prints_the_nemo_account_below_the_others(rows):
    from benchmarks import fullsize_account

    assert "nemo" in fullsize_account.ACCOUNTS
    text = fullsize_account.table(rows)
    assert text.count("| Memorization | NeMo") == 3 and "**" in text
    assert text.index("localisation of the benchmark's prompt") > text.index("| Memorization | NeMo, one UNet batch")


def test_localisation_counts_batches_from_the_sequential_evaluations():
    assert schedule_length() == 16  # θ 5 → 1.25 by 0.25, k 0 → 15 (max_k 20 not reached)
    assert schedule_length(max_k=5) == 5
    p = {"setup": 1.0, "activations": 0.0, "batch": 0.1, "exact": 0.02}
    loc = localisation(p, groups=6, evaluations=1120)
    assert loc["neuron_trials_at_least"] == 1096
    assert loc["unet_batches_lower_bound"] == 1 + 3 + 2 + 183 + 1
    assert loc["projected_s_lower_bound"] == pytest.approx(1.02 + 188 * 0.1)
    assert loc["extra_batches_within_target"] == int((25 - 19.82) / 0.1)
    assert loc["sequential_projected_s"] == pytest.approx(1.02 + 1119 * 0.02)
    # the UNet at the measured forwards' rate (38.3 ms for 10 latents, 66.6 ms for 20), the rest as given
    p.update(now=0.021, forward=0.02, setup_forward=0.02, seeds=10)
    loc = localisation(p, groups=6, evaluations=1120)
    per = (0.0666 - 0.0383496) / 10
    assert loc["measured_rate_batch_s"] == pytest.approx(0.0383496 + 50 * per + 6 * 0.001)
    fixed = 1.02 - 0.02 - 0.02 + 2 * 0.0383496 + 0.001
    assert loc["measured_rate_s_lower_bound"] == pytest.approx(fixed + 188 * loc["measured_rate_batch_s"])
    # the analogue's wrong guesses and near ties, each a batch or an exact evaluation more
    w, t = loc["analogue_extra_batches"], loc["analogue_exact"]
    assert 0 < w < t < 1119
    assert loc["analogue_projected_s"] == pytest.approx(loc["projected_s_lower_bound"] + w * 0.1 + t * 0.02)
