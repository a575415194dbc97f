"""One declared range per cost argument (backend.core.bounds) and the per-call cost cap."""

import math
import re

import pytest

from backend.core import bounds
from backend.core.zerogpu import gpu


@pytest.mark.parametrize(
    "r, bad, words",
    [
        (bounds.REL_EXAMPLE, 500, "The held-out example must be a whole number between 0 and 199 (got 500)."),
        (bounds.MEMO_SEEDS, 0, "The number of seeds must be a whole number between 1 and 8 (got 0)."),
        (bounds.MATH_K, 0.5, "K must be between 1 % and 30 % (got 0.5 %)."),
        (bounds.MATH_FACTOR, math.inf, "The scale factor must be between 0 and 2 (got 'inf')."),
        (bounds.PISSA_STEPS, 15.5, "The number of steps must be a whole number between 10 and 500 (got 15.5)."),
        (bounds.PISSA_RANK, None, "The rank r must be a whole number between 1 and 128 (got an empty box)."),
        (bounds.PISSA_SEEDS, True, "The number of seeds must be a whole number between 1 and 5"),
    ],
)
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


# Every cost argument's declared range (lo, hi, whole): a bound dropped, added or widened is seen here
DECLARED = {
    "IMAGE_SIDE": (2, 4096, True),
    "REL_EXAMPLE": (0, 199, True),
    "REL_SENTENCES": (20, 240, True),
    "FEAT_LIMIT": (1, 500, True),
    "CONTRAST_IMAGES": (2, 64, True),
    "CONTRAST_ROWS": (1, 500, True),
    "CONTRAST_TOP_IMAGES": (0, 16, True),
    "STEER_CLAMPS": (1, 8, True),
    "STEER_SUPPRESS": (0, 256, True),
    "MEMO_SEEDS": (1, 8, True),
    "MEMO_STATS": (2, 20000, True),
    "MEMO_TABLE": (1, 50, True),
    "MATH_K": (1, 30, False),
    "MATH_FACTOR": (0, 2, False),
    "MATH_SAMPLES": (1, 64, True),
    "PISSA_RANK": (1, 128, True),
    "PISSA_SEEDS": (1, 5, True),
    "PISSA_STEPS": (10, 500, True),
    "PISSA_CONVERT_STEPS": (1, 100, True),
    "PISSA_LR": (0, 0.99, False),
    "PISSA_ITERS": (1, 50, True),
}


def test_every_tab_range_is_declared_finite_and_checked_somewhere():
    from pathlib import Path

    ranges = {k: v for k, v in vars(bounds).items() if isinstance(v, bounds.Range)}
    assert {k: (r.lo, r.hi, r.whole) for k, r in ranges.items()} == DECLARED
    assert all(math.isfinite(r.lo) and math.isfinite(r.hi) and r.lo < r.hi for r in ranges.values())
    assert bounds.PISSA_INITS == ("pissa", "pissa_niter_4")
    # each is used by the code that takes the argument (a tab, a tool, a service), none declared for nothing
    root = Path(bounds.__file__).resolve().parents[2]
    source = "\n".join(
        line
        for d in ("backend", "components")
        for p in (root / d).rglob("*.py")
        if p.name != "bounds.py"
        for line in p.read_text().splitlines()
        if not line.lstrip().startswith(("from ", "import "))
    )  # a use, not an import
    assert [k for k in ranges if not re.search(rf"\b{k}\b", source)] == []


def test_the_agent_tools_state_the_declared_ranges_of_their_tabs():
    """The ranges an MCP tool states in its schema are the bounds objects its tab checks with."""
    from components.agents import tools

    assert tools.ranges() == {
        "find_features": {"limit": bounds.FEAT_LIMIT},
        "steer_feature": {
            "more_clamps": bounds.Items(bounds.STEER_CLAMPS, counted=1),
            "suppress": bounds.Items(bounds.STEER_SUPPRESS),
        },
        "contrast_features": {
            "n": bounds.CONTRAST_IMAGES,
            "rows": bounds.CONTRAST_ROWS,
            "images_a_base64": bounds.Items(bounds.CONTRAST_IMAGES),
            "images_b_base64": bounds.Items(bounds.CONTRAST_IMAGES),
        },
        "generate_without_neurons": {"seeds": bounds.MEMO_SEEDS},
        "math_neurons": {"k_percent": bounds.MATH_K, "factor": bounds.MATH_FACTOR, "n_samples": bounds.MATH_SAMPLES},
        "pissa_layer": {"rank": bounds.PISSA_RANK, "init": bounds.PISSA_INITS},
    }


def test_the_cap_refuses_by_measured_time_and_stops_what_it_lets_run(monkeypatch):
    """Under WORKBENCH_CALL_CAP_S the ZeroGPU allowance (here 100 + n s: 101 s for n=1, over a 1 s
    cap) refuses nothing: a setting never measured runs under the cap's time budget, a measured one
    is refused when its measured time reaches the cap (backend.core.costs)."""
    import time

    from backend.core import costs, limits

    ran = []

    @gpu(duration=lambda n: 100 + n)
    def work(n):
        ran.append(n)
        for _ in range(n):
            limits.check("the work")
            time.sleep(0.02)
        return n

    costs.clear()
    monkeypatch.delenv("WORKBENCH_CALL_CAP_S", raising=False)
    monkeypatch.setenv("WORKBENCH_CALL_CAP_S", "1")
    assert work(1) == 1  # the smallest setting runs although its allowance is 101 s
    assert work(1) == 1  # and again, measured at 0.02 s
    t0 = time.perf_counter()
    with pytest.raises(limits.JobTooLong, match="time limit of 1 s"):
        work(200)  # 4 s of work, estimated from n=1's rate at 0.02 × 300/101 s: runs, stopped at the cap
    assert time.perf_counter() - t0 < 1.5
    with pytest.raises(bounds.CostTooHigh) as e:
        work(200)  # measured: it ran the whole cap
    assert (
        "estimated at more than 1 s from the times measured on this server, over this server's per-call cap of 1 s"
    ) in str(e.value)  # (stopped there: it needed more than the cap)
    assert ran == [1, 1, 200]  # nothing computed for the refused call
    assert work(3) == 3  # another small setting still runs
    handler = gpu(duration=300, estimate=False)(lambda: "ok")  # a handler's allowance is no estimate
    assert handler() == "ok"


def test_only_an_estimate_over_the_cap_is_refused(monkeypatch):
    """Issue 51 (6): a refusal needs the estimate over the cap; one at the cap fits. Just over it, the
    estimate is not rounded down to the cap's own number."""
    monkeypatch.setenv("WORKBENCH_CALL_CAP_S", "15")
    bounds.check_cost(15.0, "This computation", measured=True)
    bounds.check_cost(8.5, "This computation")
    with pytest.raises(bounds.CostTooHigh, match=r"estimated at more than 15 s from the times measured"):
        bounds.check_cost(15.2, "This computation", measured=True)
    with pytest.raises(bounds.CostTooHigh, match=r"estimated at 17 s, over this server's per-call cap of 15 s"):
        bounds.check_cost(17.0, "This computation")
