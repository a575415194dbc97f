"""Feature index: exact streaming top-k, statistics, bounded memory, round trip on disk; explainer IoU."""

import resource

import numpy as np
import pytest
import torch

from backend.sae import explain as E
from backend.sae import scenes as S
from backend.sae.index import HIST_EDGES, FeatureIndex, IndexBuilder

torch.set_num_threads(1)


def synthetic_codes(g, B, P, F, k):
    vals = torch.rand(B, P, k, generator=g) * torch.bernoulli(torch.full((B, P, k), 0.7), generator=g)
    idx = torch.stack([torch.randperm(F, generator=g)[:k] for _ in range(B * P)]).view(B, P, k)
    return vals, idx


def test_streaming_top_k_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    F, P, k, K = 20, 9, 3, 4
    b = IndexBuilder(F, P, K, map_dtype=torch.float32)
    all_maps = []
    for _ in range(7):
        vals, idx = synthetic_codes(g, 11, P, F, k)
        b.update(vals, idx)
        dense = torch.zeros(11, P, F).scatter_add_(2, idx, vals)
        all_maps.append(dense)
    dense = torch.cat(all_maps)  # [N, P, F]
    scores = dense.mean(1)  # [N, F]
    t = b.tensors()
    for f in range(F):
        ref = torch.argsort(scores[:, f], descending=True)[:K]
        assert t["top_ids"][f].tolist() == ref.tolist()
        torch.testing.assert_close(t["top_maps"][f], dense[ref, :, f].T.T)
        torch.testing.assert_close(t["top_scores"][f], scores[ref, f])
    fires = (dense > 0).sum((0, 1))
    assert t["fire_count"].tolist() == fires.tolist()
    torch.testing.assert_close(t["density"], fires.float() / (dense.shape[0] * P))
    torch.testing.assert_close(t["max_act"], dense.amax((0, 1)))
    assert t["hist"].sum(1).tolist() == fires.tolist()
    assert len(t["hist_edges"]) == t["hist"].shape[1] + 1


@pytest.mark.timeout(120)
def test_memory_stays_within_features_times_k_on_a_stream_20x_the_zoo_set():
    """2048 zoo images × 20 = 40,960 images streamed; the state never grows past F × K × (P + …)."""
    F, P, k, K = 128, 144, 4, 16
    b = IndexBuilder(F, P, K)
    bound = IndexBuilder.bound_bytes(F, P, K)
    start = b.state_bytes()
    assert start <= bound
    g = torch.Generator().manual_seed(1)
    planted = 77  # one feature fires strongly only on images 30000..30004
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    B = 512
    n = 0
    while n < 20 * 2048:
        idx = torch.randint(0, F - 1, (B, P, k), generator=g)
        idx[idx >= planted] += 1  # the planted feature never fires at random
        vals = torch.rand(B, P, k, generator=g)
        ids = torch.arange(n, n + B)
        hit = (ids >= 30000) & (ids < 30005)
        if hit.any():
            idx[hit, :, 0] = planted
            vals[hit, :, 0] = 50.0
        b.update(vals, idx, ids)
        assert b.state_bytes() == start
        n += B
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert b.n_images == 20 * 2048
    assert sorted(b.top_ids[planted, :5].tolist()) == list(range(30000, 30005))
    assert (b.top_ids[planted, 5:] == -1).all()
    # the stream's codes alone would be ~40,960 × 144 × 4 × 12 bytes ≈ 283 MB; resident growth stays small
    assert (rss1 - rss0) * 1024 < 100 * 2**20


def test_index_round_trip(tmp_path):
    g = torch.Generator().manual_seed(2)
    b = IndexBuilder(10, 16, 3)
    b.update(*synthetic_codes(g, 8, 16, 10, 2))
    idx = FeatureIndex(b.tensors(), {"grid": 4, "hookpoint": "x"})
    idx.save(tmp_path / "i.safetensors")
    back = FeatureIndex.load(tmp_path / "i.safetensors")
    assert back.meta == {"grid": 4, "hookpoint": "x"}
    for key, val in idx.tensors.items():
        torch.testing.assert_close(back.tensors[key], val)
    ids, maps, scores = back.top(3, 5)
    assert maps.shape == (len(ids), 4, 4) and len(scores) == len(ids)
    with pytest.raises(IndexError):
        back.top(10)
    assert torch.equal(back.tensors["hist_edges"], HIST_EDGES)


def test_regions_and_iou_recover_a_planted_mask():
    spec = {
        "size": 48,
        "noise_seed": 0,
        "objects": [
            {"shape": "square", "colour": "red", "texture": "plain", "position": "top left", "box": [4, 4, 20]}
        ],
    }
    img, masks = S.render(spec)
    # a patch-level map of the object: fraction of each 4×4 patch covered
    m = masks["red"].reshape(12, 4, 12, 4).mean((1, 3))
    reg = E.regions(torch.tensor(m)[None], 48)
    assert E.iou(reg[0], masks["red"]) > 0.85
    assert E.iou(reg[0], masks["blue"]) == 0.0
    ex = E.ConceptExplainer().explain(0, [spec], img[None], torch.tensor(m)[None])
    assert ex.family in ("colour", "shape", "texture", "position") and ex.score > 0.85
    # an all-zero map has an empty region
    assert not E.regions(torch.zeros(1, 12, 12), 48).any()
    dimmed = E.dim_outside(img, reg[0].numpy())
    assert (dimmed[~reg[0].numpy()] <= img[~reg[0].numpy()]).all()


def test_scenes_are_deterministic_and_captions_parse():
    rng = np.random.default_rng(0)
    for _ in range(50):
        spec = S.sample_spec(rng)
        a, ma = S.render(spec)
        b, _ = S.render(spec)
        assert np.array_equal(a, b)
        cap = S.caption(spec)
        assert S.parse_caption(cap) is not None
        acc = S.attribute_accuracy(cap, spec)
        assert all(v == 1.0 for v in acc.values())
        for o in spec["objects"]:
            assert ma[o["colour"]].any() and ma[o["shape"]].any()
    assert S.parse_caption("a plain red red circle top left") is None
    assert S.parse_caption("red red red red") is None
    assert S.parse_caption("a plain red circle top left and a plain blue square top left") is None


def test_model_explainer_interface_gets_the_dimmed_views():
    spec = {
        "size": 48,
        "noise_seed": 1,
        "objects": [
            {"shape": "circle", "colour": "blue", "texture": "plain", "position": "bottom right", "box": [26, 26, 20]}
        ],
    }
    img, masks = S.render(spec)
    m = torch.tensor(masks["circle"].reshape(12, 4, 12, 4).mean((1, 3)))[None]
    seen = {}

    def describe(images, prompt):
        seen["n"], seen["prompt"] = len(images), prompt
        seen["dim"] = images[0]
        return "Blue circles"

    ex = E.ModelExplainer(describe).explain(4, [spec], img[None], m)
    assert seen["n"] == 1 and "highlighted" in seen["prompt"]
    assert (seen["dim"] <= img).all() and (seen["dim"] < img).any()
    assert ex.label == "Blue circles" and ex.family == "colour" and ex.score > 0.8 and ex.explainer == "model"


def test_sae_modules_import_each_other_without_a_circle():
    """backend.sae's modules (function-level imports included) form no import cycle: the index
    knows nothing of organisms, and features builds on it."""
    import ast

    from tests.conftest import ROOT

    pkg = ROOT / "backend" / "sae"
    names = {p.stem for p in pkg.glob("*.py")} - {"__init__"}
    graph = {}
    for n in names:
        deps = set()
        for node in ast.walk(ast.parse((pkg / f"{n}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module} if node.module else {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("backend.sae."):
                deps.add(node.module.rpartition(".")[2])
        graph[n] = deps & names
    assert "features" not in graph["index"] and "cli" not in graph["index"]

    def reaches(a, b, seen=()):
        return any(d == b or (d not in seen and reaches(d, b, seen + (d,))) for d in graph[a])

    mine = {"features", "index", "vlm", "steer", "explain", "scenes", "cli"}  # the feature browser's modules
    assert not [n for n in names & mine if reaches(n, n)], graph


def test_ties_keep_the_image_streamed_first_and_rank_by_image_id():
    """A feature's slots are unordered while streaming; the index ranks them as the sharded job's merge
    does (score, then image id), and a later image that only ties an entry does not displace it."""
    F, P, K = 4, 3, 3
    b = IndexBuilder(F, P, K, map_dtype=torch.float32)
    for i in [4, 0, 3, 1, 2]:  # five images give feature 0 the same score
        b.update(torch.full((1, P, 1), 0.5), torch.zeros((1, P, 1), dtype=torch.long), torch.tensor([i]))
    t = b.tensors()
    assert t["top_ids"][0].tolist() == [0, 3, 4]
    assert t["top_scores"][0].tolist() == [0.5] * 3
    assert t["top_ids"][1:].eq(-1).all() and t["top_maps"][0].eq(0.5).all()
