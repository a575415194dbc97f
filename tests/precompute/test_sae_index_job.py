"""The sharded SAE feature index equals the single-process one and the streaming builder's exactly,
resumes after an interruption, and is read by the Features backend unchanged."""

import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT
from tests.helpers.server import free_port
from tests.precompute.test_sharding import Solo

N_IMAGES, CHUNK = 192, 32  # 6 chunks


def torchrun(out, *extra):
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
            "backend.precompute.sae_index",
            "--out",
            str(out),
            "--images",
            str(N_IMAGES),
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
def org():
    from backend.core.presets import ZOO_ROOT
    from backend.sae.loading import load_organism

    if not (ZOO_ROOT / "llava-scenes-sae" / "manifest.json").exists():
        pytest.fail("the llava-scenes-sae organism is not committed")
    return load_organism()


def test_merge_breaks_ties_by_image_id_whatever_the_split():
    from backend.precompute.sae_index import merge_states

    def part(scores, ids):
        s = torch.tensor([scores], dtype=torch.float32)
        i = torch.tensor([ids])
        return {
            "top_scores": s,
            "top_ids": i,
            "top_maps": i[..., None].float().half().expand(-1, -1, 2),
            "fire_count": torch.ones(1, dtype=torch.long),
            "act_sum": torch.ones(1, dtype=torch.float64),
            "max_act": s.amax(1),
            "hist": torch.ones(1, 3, dtype=torch.long),
            "n_tokens": torch.tensor([4]),
            "n_images": torch.tensor([2]),
        }

    inf = float("-inf")
    a = merge_states([part([2.0, 1.0], [5, 0]), part([2.0, inf], [3, -1])], 3)
    b = merge_states([part([2.0, inf], [3, -1]), part([2.0, 1.0], [5, 0])], 3)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert a["top_ids"].tolist() == [[3, 5, 0]] and a["top_maps"][0, :, 0].tolist() == [3, 5, 0]
    assert a["fire_count"].item() == 2 and a["n_images"].item() == 4 and a["max_act"].item() == 2.0


@pytest.mark.timeout(600)
def test_sharded_index_equals_direct_build_resumes_and_loads(org, tmp_path):
    from backend.precompute import sae_index as job
    from backend.sae import pages
    from backend.sae.index import INDEX_FILE, FeatureIndex, build_index

    solo = job.run(org, tmp_path / "solo", n_images=N_IMAGES, chunk=CHUNK, state=Solo())
    direct = build_index(
        org.model,
        org.tokenizer,
        org.sae,
        org.index_specs[:N_IMAGES],
        hookpoint=org.hookpoint,
        top_k=16,
        batch_size=CHUNK,
    )
    assert solo.tensors.keys() == direct.tensors.keys()
    for k in direct.tensors:  # the streaming builder and the chunk merge agree bit for bit
        assert torch.equal(solo.tensors[k], direct.tensors[k]), k
    assert solo.meta["n_images"] == N_IMAGES and solo.meta["grid"] == direct.meta["grid"]

    # Rank 1 of 2 killed after one chunk, a torn copy of chunk 2 left behind; then the job is
    # resumed by 2 processes: the same index, bit for bit, and the finished chunk is not redone.
    class Rank1(Solo):
        process_index, num_processes, is_main_process = 1, 2, False

    with pytest.raises(SystemExit):
        job.run(org, tmp_path / "two", n_images=N_IMAGES, chunk=CHUNK, state=Rank1(), stop_after=1)
    parts = sorted((tmp_path / "two" / "parts").glob("*.safetensors"))
    assert [p.name for p in parts] == ["sae-index-chunk-00001.safetensors"]
    assert not (tmp_path / "two" / INDEX_FILE).exists()
    mtimes = {p.name: p.stat().st_mtime_ns for p in parts}
    torn = tmp_path / "two" / "parts" / "sae-index-chunk-00002.safetensors"  # a torn write of chunk 2
    torn.write_bytes(parts[0].read_bytes()[:300])
    out = torchrun(tmp_path / "two")
    assert out.returncode == 0, out.stderr[-3000:]
    two = FeatureIndex.load(tmp_path / "two" / INDEX_FILE)
    for k in solo.tensors:
        assert torch.equal(two.tensors[k], solo.tensors[k]), k
    assert two.meta["precompute"]["processes"] == 2 and two.meta["n_tokens"] == solo.meta["n_tokens"]
    assert all((tmp_path / "two" / "parts" / n).stat().st_mtime_ns == t for n, t in mtimes.items())
    assert len(list((tmp_path / "two" / "parts").glob("*.safetensors"))) == N_IMAGES // CHUNK

    # The Features backend reads the file as it reads the organism's own index.
    o2 = dataclasses.replace(org, index=two, model_id="test:precomputed-index")
    page = pages.feature_page(o2, int(two.tensors["density"].argmax()))
    assert page["top"] and all(0 <= t["image_id"] < N_IMAGES for t in page["top"])
    live = {int(f) for f in (two.tensors["fire_count"] > 0).nonzero().flatten()}
    assert {r["feature"] for r in pages.feature_table(o2)} == live  # the list shows the live features
