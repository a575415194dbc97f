"""The contrast's rank test in torch (backend.sae.ranktest, run where a GPU holds the activations)
computes scipy's Mann–Whitney U numbers: the same U, and p-values to float64 rounding."""

import numpy as np
import pytest
import torch
from scipy import stats

from backend.sae import contrast as C
from backend.sae import ranktest


def sparse_sets(rng, n1, n2, f, fire=(0.3, 0.2)):
    """SAE-like activations: mostly exact zeros (large ties), some values repeated, a few columns silent."""
    a = rng.exponential(1.0, (n1, f)) * (rng.random((n1, f)) < fire[0])
    b = rng.exponential(1.3, (n2, f)) * (rng.random((n2, f)) < fire[1])
    a[:, :5] = np.round(a[:, :5])  # ties among the non-zero values too
    b[:, :5] = np.round(b[:, :5])
    return a.astype(np.float32), b.astype(np.float32)


@pytest.mark.parametrize("n1,n2,f", [(64, 64, 300), (7, 12, 50), (3, 2, 20), (20, 30, ranktest.CHUNK + 7)])
def test_u_and_p_are_scipys(n1, n2, f):
    a, b = sparse_sets(np.random.default_rng(n1 * 1000 + f), n1, n2, f)
    a[:, -1] = 0.0
    b[:, -1] = 0.0  # silent on both: no variance, scipy's p is 1 and so is ours
    want = stats.mannwhitneyu(a.astype(np.float64), b.astype(np.float64), axis=0, method="asymptotic")
    u, p = (x.numpy() for x in ranktest.mann_whitney(torch.from_numpy(a), torch.from_numpy(b)))
    assert u.dtype == np.float64
    np.testing.assert_array_equal(u, want.statistic)
    assert p[-1] == want.pvalue[-1] == 1.0
    np.testing.assert_allclose(p, want.pvalue, rtol=1e-9, atol=1e-15)


def test_a_perfect_separation_has_the_smallest_p_the_sizes_allow():
    a = np.arange(1, 11, dtype=np.float32)[:, None] + 100
    b = np.arange(1, 11, dtype=np.float32)[:, None]
    u, p = ranktest.mann_whitney(torch.from_numpy(a), torch.from_numpy(b))
    assert u.item() == 100 and p.item() == pytest.approx(C.smallest_p(10, 10), rel=1e-9)


def test_the_contrast_on_a_device_ranks_as_scipy_does():
    """contrast_stats with `device` (the torch test, here on the CPU) gives the rows the scipy path gives."""
    a, b = sparse_sets(np.random.default_rng(3), 40, 50, 200, fire=(0.35, 0.2))
    a[:, 7] += 2.0  # one feature clearly stronger in A
    host = C.contrast_stats(a, b, rows=200)
    dev = C.contrast_stats(a, b, rows=200, device="cpu")
    assert [r["feature"] for r in dev["rows"]] == [r["feature"] for r in host["rows"]]
    assert dev["rows"][0]["feature"] == 7 and dev["n_significant"] == host["n_significant"] >= 1
    for x, y in zip(dev["rows"], host["rows"]):
        assert x["effect"] == pytest.approx(y["effect"], abs=1e-12)
        if y["p"] is None:
            assert x["p"] is None
        else:
            assert x["p"] == pytest.approx(y["p"], rel=1e-6) and x["q"] == pytest.approx(y["q"], rel=1e-6)
