"""One declared range per cost argument (backend.core.bounds) and the per-call cost cap."""
import math

import pytest

from backend.core import bounds
from backend.core.zerogpu import gpu


@pytest.mark.parametrize("r, bad, words", [
    (bounds.REL_EXAMPLE, 500, "The held-out example must be a whole number between 0 and 199 (got 500)."),
    (bounds.MEMO_SEEDS, 0, "The number of seeds must be a whole number between 1 and 8 (got 0)."),
    (bounds.MATH_K, 0.5, "K must be between 1 % and 30 % (got 0.5 %)."),
    (bounds.MATH_FACTOR, math.inf, "The scale factor must be between 0 and 2 (got 'inf')."),
    (bounds.PISSA_STEPS, 15.5, "The number of steps must be a whole number between 10 and 500 (got 15.5)."),
    (bounds.PISSA_RANK, None, "The rank r must be a whole number between 1 and 128 (got an empty box)."),
    (bounds.PISSA_SEEDS, True, "The number of seeds must be a whole number between 1 and 5"),
])
def test_a_value_outside_is_refused_with_the_range_never_clamped(r, bad, words):
    with pytest.raises(ValueError) as e:
        bounds.check(r, bad)
    assert str(e.value).startswith(words) and str(e.value).endswith("Nothing was computed.")


def test_values_inside_come_back_unchanged():
    assert bounds.check(bounds.REL_EXAMPLE, 199) == 199 and isinstance(bounds.check(bounds.MEMO_SEEDS, 3.0), int)
    assert bounds.check(bounds.MATH_FACTOR, 1.1) == 1.1 and bounds.check(bounds.MATH_K, "2.5") == 2.5
    assert bounds.clamp_max(3.7) == 37.0 and bounds.clamp_max(0.2) == 10.0 and bounds.clamp_max(None) == 100.0
    # a range that reads plainly: 10 × 59.5071 is offered as 0–600, not 0–595.071
    assert bounds.clamp_max(59.5071) == 600.0 and bounds.clamp_max(1.234) == 13.0 and bounds.clamp_max(12.0) == 120.0


def test_every_tab_range_is_finite_and_the_inits_are_the_tabs():
    ranges = [v for v in vars(bounds).values() if isinstance(v, bounds.Range)]
    assert len(ranges) >= 12 and all(math.isfinite(r.lo) and math.isfinite(r.hi) and r.lo < r.hi for r in ranges)
    assert bounds.PISSA_INITS == ("pissa", "pissa_niter_4")


def test_a_computation_over_the_cap_is_refused_before_it_starts(monkeypatch):
    ran = []

    @gpu(duration=lambda n: 10 + 2 * n)
    def work(n):
        ran.append(n)
        return n

    monkeypatch.delenv("WORKBENCH_CALL_CAP_S", raising=False)
    assert work(100) == 100  # no cap set: as before
    monkeypatch.setenv("WORKBENCH_CALL_CAP_S", "30")
    assert work(5) == 5
    with pytest.raises(bounds.CostTooHigh) as e:
        work(50)
    assert "estimated at 110 s, over this server's per-call cap of 30 s" in str(e.value)
    assert ran == [100, 5]  # nothing computed for the refused call
    handler = gpu(duration=300, estimate=False)(lambda: "ok")  # a handler's allowance is no estimate
    assert handler() == "ok"
