"""Every endpoint of the served app survives hostile input (fewer inputs than the full script)."""

import pytest

from tests.conftest import ARTIFACTS
from tests.helpers.server import serve
from tests.load.fuzz import IMAGE_KINDS, Param, _image_bytes, draw, endpoint_families, endpoint_params, fuzz
from tests.load.harness import make_client


@pytest.mark.timeout(1500)
def test_fuzz_every_endpoint_no_crash():
    ARTIFACTS.mkdir(exist_ok=True)
    with serve(env={"WORKBENCH_CHECK_WEIGHTS": "1"}, log_path=ARTIFACTS / "fuzz-server.log") as (url, _):
        endpoints = endpoint_params(make_client(url))
        report = fuzz(url, per_endpoint=5, seed=1, max_seconds_per_endpoint=40)
    print(report.summary())
    assert report.crashes == []
    assert set(report.per_endpoint) == set(endpoints) - {"/status"}
    assert report.calls >= 5 * len(report.per_endpoint) * 0.5
    # every model-touching endpoint belongs to a tab's family (the full script counts per family)
    fams = endpoint_families(set(endpoints) - {"/status"})
    assert {"relevance", "features", "memorization", "math_neurons", "adapters"} <= set(fams)
    assert set(report.per_family) == set(fams)


def test_endpoint_families_are_the_tabs_that_declare_them():
    fams = endpoint_families(["/steer", "/explain_text", "/mn_evaluate", "/race", "/memo_find", "/made_up"])
    assert fams["features"] == ["/steer"] and fams["relevance"] == ["/explain_text"]
    assert fams["math_neurons"] == ["/mn_evaluate"] and fams["adapters"] == ["/race"]
    assert fams["memorization"] == ["/memo_find"] and fams["made_up"] == ["/made_up"]


def test_fuzz_inputs_cover_the_hostile_kinds(tmp_path):
    import random

    rng = random.Random(0)
    img = Param("image", "Image", {})
    nums = Param("k", "Slider", {"type": "number", "description": "numeric value between 1 and 30"})
    txt = Param("prompt", "Textbox", {"type": "string"})
    drawn_nums = {repr(draw(nums, rng, tmp_path)) for _ in range(300)}
    assert {"nan", "inf", "-inf", "-1", "31.0"} <= drawn_nums
    from tests.load.fuzz import TEXTS

    for t in TEXTS:  # every hostile text must be sendable, or the client fails before the server
        t.encode("utf-8")
    drawn_txt = [draw(txt, rng, tmp_path) for _ in range(300)]
    assert "" in drawn_txt and any(isinstance(t, str) and len(t) >= 100_000 for t in drawn_txt)
    assert all(isinstance(draw(img, rng, tmp_path), dict) for _ in range(5))
    from PIL import Image
    import io

    for kind in IMAGE_KINDS:
        data = _image_bytes(kind, rng)
        if kind in ("not-an-image", "empty", "truncated"):
            with pytest.raises(OSError):  # PIL's UnidentifiedImageError is one; a truncated file raises it too
                Image.open(io.BytesIO(data)).load()
        else:
            Image.open(io.BytesIO(data)).load()
