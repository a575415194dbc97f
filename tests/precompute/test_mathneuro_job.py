"""MathNeuro statistics sharded over 2 processes equal the single-process result exactly, and give
the masks `identify` gives."""

import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import ROOT
from tests.helpers.server import free_port
from tests.precompute.test_sharding import Solo

pytest.importorskip("backend.mathneuro.service")


@pytest.mark.timeout(600)
def test_sharded_norms_equal_single_process_and_identify(tmp_path):
    from backend.core.presets import ZOO_ROOT
    from backend.mathneuro import core, identify
    from backend.mathneuro.service import bench
    from backend.precompute import mathneuro as job

    if not (ZOO_ROOT / "math-llama" / "manifest.json").exists():
        pytest.fail("the math-llama organism is not committed")
    b = bench("zoo")
    solo = job.run(b, tmp_path / "solo", n=12, chunk=4, state=Solo())
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "--master_addr",
            "127.0.0.1",
            "--master_port",
            str(port),
            "-m",
            "backend.precompute.mathneuro",
            "--out",
            str(tmp_path / "two"),
            "--samples",
            "12",
            "--chunk",
            "4",
            "--cpu",
            "--source",
            "zoo",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for kind in job.KINDS:
        two = load_file(str(tmp_path / "two" / f"mathneuro-norms-{kind}.safetensors"))
        assert set(two) == set(solo[kind])
        assert all(torch.equal(two[k], solo[kind][k]) for k in two)  # bit-identical
        direct = core.input_norms(b.model, b.data[f"ident_{kind}"][:12], tokenizer=b.tok)
        # float32 activations batched differently: equal to float32 precision, not bit-equal
        assert all(torch.allclose(direct[k], two[k], rtol=1e-5, atol=1e-5 * float(two[k].abs().max())) for k in two)
    masks = job.load_masks(b.model, tmp_path / "two", 0.1)
    ref = identify(b.model, b.data["ident_math"][:12], b.data["ident_nonmath"][:12], 0.1, tokenizer=b.tok)
    assert core.overlap(masks, ref) >= 0.999
