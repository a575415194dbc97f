"""NeMo's neuron statistics sharded over 2 processes (interrupted, then resumed) equal the
single-process result bit for bit, agree with the service's in-process statistics, and are what the
service uses when WORKBENCH_NEMO_STATS names the file."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT
from tests.helpers.server import free_port
from tests.precompute.test_sharding import Solo

CHUNK = 8


def torchrun(out, prompts_file, *extra):
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
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
            "backend.precompute.nemo_stats",
            "--out",
            str(out),
            "--source",
            "zoo",
            "--prompts",
            str(prompts_file),
            "--chunk",
            str(CHUNK),
            "--cpu",
            *map(str, extra),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def memo():
    from backend.core.presets import ZOO_ROOT, active
    from backend.nemo import service

    if not (ZOO_ROOT / "sd-memo" / "manifest.json").exists():
        pytest.fail("the sd-memo organism is not committed")
    return service._load(active(service.TAB, "zoo"))  # a private copy: no shared state touched


def test_sums_merge_to_torch_mean_and_std():
    from backend.core.precompute import merge_sum
    from backend.nemo import stats as ns

    g = torch.Generator().manual_seed(0)
    acts = {"l": torch.rand(37, 5, generator=g) * 3 + 1}
    parts = [ns.partial_sums({"l": acts["l"][s : s + 8]}) for s in range(0, 37, 8)]
    out = ns.finish(merge_sum(parts))
    assert int(out["count"][0]) == 37
    # float64 sums: within a float32 rounding of torch's own float32 reductions
    assert torch.allclose(out["mean/l"], acts["l"].mean(0), rtol=1e-6, atol=0)
    assert torch.allclose(out["std/l"], acts["l"].std(0), rtol=1e-5, atol=0)
    with pytest.raises(ValueError, match="two prompts"):
        ns.finish(ns.partial_sums({"l": acts["l"][:1]}))


@pytest.mark.timeout(600)
def test_sharded_stats_equal_single_process_resume_and_service_loads(memo, tmp_path, monkeypatch):
    from backend.nemo import core
    from backend.nemo import stats as ns
    from backend.precompute import nemo_stats as job

    prompts = memo.stats_prompts[:60]
    pfile = tmp_path / "prompts.json"
    pfile.write_text(json.dumps(prompts))
    solo = job.run(memo.pipe, prompts, tmp_path / "solo", chunk=CHUNK, model_id=memo.model_id, state=Solo())

    # Rank 0 of 2 killed after two chunks; then 2 processes resume the job from what is on disk.
    class Rank0(Solo):
        num_processes = 2

    with pytest.raises(SystemExit):
        job.run(memo.pipe, prompts, tmp_path / "two", chunk=CHUNK, model_id=memo.model_id, state=Rank0(), stop_after=2)
    assert len(list((tmp_path / "two" / "parts").glob("*.safetensors"))) == 2
    assert not (tmp_path / "two" / ns.STATS_FILE).exists()
    out = torchrun(tmp_path / "two", pfile)
    assert out.returncode == 0, out.stderr[-3000:]
    from safetensors.torch import load_file

    two = load_file(str(tmp_path / "two" / ns.STATS_FILE))
    assert two.keys() == solo.keys()
    for k in solo:
        assert torch.equal(two[k], solo[k]), k  # bit-identical
    meta = ns.file_meta(tmp_path / "two" / ns.STATS_FILE)
    assert meta["model_id"] == memo.model_id and meta["prompts_sha256"] == ns.prompts_digest(prompts)

    # Against the service's own in-process computation (float32 torch.mean/std over the same
    # activations): equal to a few float32 roundings; the float64 sums are the more accurate side.
    ref = core.neuron_stats(memo.pipe, prompts)
    got = ns.load_stats(tmp_path / "two" / ns.STATS_FILE, memo.pipe.unet)
    assert got.n_prompts == len(prompts) and list(got.mean) == list(ref.mean)
    for n in ref.mean:
        assert torch.allclose(got.mean[n], ref.mean[n], rtol=1e-6, atol=0)
        assert torch.allclose(got.std[n], ref.std[n], rtol=1e-5, atol=0)

    # The service uses the file for this model, ignores one made for another model, and refuses a
    # file for other layers with a clear message.
    monkeypatch.setenv(ns.STATS_ENV, str(tmp_path / "two" / ns.STATS_FILE))
    m = dataclasses.replace(memo, _stats=None)
    assert m.stats().n_prompts == len(prompts)
    assert all(torch.equal(m.stats().mean[n], two[f"mean/{n}"]) for n in ref.mean)

    other = ns.save_stats(dict(two), tmp_path / "other.safetensors", model_id="hub:someone/else")
    monkeypatch.setenv(ns.STATS_ENV, str(other))
    m = dataclasses.replace(memo, _stats=None)
    assert m.stats().n_prompts == len(m.stats_prompts)  # computed in-process, as before

    bad = {k: v for k, v in two.items() if not k.startswith(("mean/mid", "std/mid"))}
    monkeypatch.setenv(ns.STATS_ENV, str(ns.save_stats(bad, tmp_path / "bad.safetensors")))
    with pytest.raises(ValueError, match="other value layers"):
        dataclasses.replace(memo, _stats=None).stats()
    monkeypatch.setenv(ns.STATS_ENV, str(tmp_path / "missing.safetensors"))
    with pytest.raises(ValueError, match="no neuron statistics file"):
        dataclasses.replace(memo, _stats=None).stats()
