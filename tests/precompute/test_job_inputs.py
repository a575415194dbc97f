"""A job's own input files: the formats read_texts accepts, its errors, and the MathNeuro job scoring
given texts (a changed input is recomputed, not resumed from the old parts)."""

import json

import pytest
import torch

from backend.core.precompute import read_texts, texts_digest
from tests.precompute.test_sharding import Solo


def test_read_texts_formats(tmp_path):
    lines = tmp_path / "p.txt"
    lines.write_text("a red circle\n\n  a blue square  \n")
    assert read_texts(lines) == ["a red circle", "a blue square"]
    js = tmp_path / "p.json"
    js.write_text(json.dumps(["x y", {"prompt": "1 + 1 ?", "answer": "2"}, {"prompt": "q ?"}]))
    assert read_texts(js) == ["x y", "1 + 1 ? 2", "q ?"]


@pytest.mark.parametrize(
    "content, msg",
    [('{"a": 1}', "expected a JSON list"), ("[1, 2]", "expected strings"), ('["only one"]', "at least two")],
)
def test_read_texts_errors(tmp_path, content, msg):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(ValueError, match=msg):
        read_texts(p)


def test_texts_digest_depends_on_content_and_order():
    assert texts_digest(["a", "b"]) == texts_digest(["a", "b"])
    assert texts_digest(["a", "b"]) != texts_digest(["b", "a"])


@pytest.mark.timeout(300)
def test_mathneuro_job_scores_given_texts_and_recomputes_when_they_change(tmp_path):
    from backend.core.presets import ZOO_ROOT
    from backend.mathneuro import core
    from backend.mathneuro.service import bench
    from backend.precompute import mathneuro as job

    if not (ZOO_ROOT / "math-llama" / "manifest.json").exists():
        pytest.fail("the math-llama organism is not committed")
    b = bench("zoo")
    texts = {"math": b.data["ident_math"][:6], "nonmath": b.data["ident_nonmath"][:6]}
    got = job.run(b, tmp_path, chunk=4, state=Solo(), texts=texts)
    for kind in job.KINDS:
        want = core.input_norms(b.model, texts[kind], tokenizer=b.tok)
        assert set(got[kind]) == set(want)
        assert all(torch.allclose(got[kind][k], want[k]) for k in want)
    # Same folder, other texts: the old parts are not reused.
    other = {"math": b.data["ident_math"][6:12], "nonmath": b.data["ident_nonmath"][6:12]}
    again = job.run(b, tmp_path, chunk=4, state=Solo(), texts=other)
    want = core.input_norms(b.model, other["math"], tokenizer=b.tok)
    assert all(torch.allclose(again["math"][k], want[k]) for k in want)
    assert not all(torch.equal(again["math"][k], got["math"][k]) for k in want)
