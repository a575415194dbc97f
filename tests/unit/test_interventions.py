import threading

import pytest
import torch

from backend.core import interventions as iv
from tests.helpers.tiny import TinyMLP, tiny_llama


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_identical(model, snap):
    for k, v in model.state_dict().items():
        assert torch.equal(v, snap[k]), k  # bit-identical, not approximately equal


def test_zero_channels_zeroes_exactly_and_restores():
    m, x = TinyMLP(), torch.randn(5, 8)
    before = m(x)
    with iv.zero_channels(m, "fc1", [0, 3, 7]):
        h = m.fc1(x)
        assert torch.all(h[:, [0, 3, 7]] == 0) and torch.count_nonzero(h[:, [1, 2]]) > 0
        assert not torch.equal(m(x), before)
    assert torch.equal(m(x), before) and iv.count_hooks(m) == 0


def test_scale_channels_on_tuple_outputs_of_a_decoder_layer():
    model = tiny_llama()
    ids = torch.tensor([[1, 5, 9, 2]])
    base = model(ids).logits
    with iv.scale_channels_many(model, {"model.layers.0": [1, 2], "model.layers.1.mlp": [4]}, 0.0):
        assert iv.count_hooks(model) == 2
        changed = model(ids).logits
    assert not torch.allclose(base, changed)
    assert torch.equal(model(ids).logits, base) and iv.count_hooks(model) == 0


def test_no_hook_left_and_weights_restored_when_body_raises():
    m = TinyMLP()
    snap = snapshot(m)
    mask = torch.rand_like(m.fc1.weight) > 0.5
    with pytest.raises(RuntimeError):
        with iv.scale_weights(m, {"fc1.weight": mask}, 0.0), iv.zero_channels(m, "fc2", [1]):
            assert iv.count_hooks(m) == 1
            raise RuntimeError("boom")
    assert iv.count_hooks(m) == 0
    assert_identical(m, snap)


@pytest.mark.parametrize("factor", [0.0, 1.1, 0.37, 1e30, float("inf")])
def test_scale_weights_masks_exact_and_restore_bit_exact(factor):
    model = tiny_llama()
    snap = snapshot(model)
    name = "model.layers.0.mlp.up_proj.weight"
    w = dict(model.named_parameters())[name]
    mask = torch.rand_like(w) > 0.7
    with iv.scale_weights(model, {name: mask}, factor):
        assert torch.equal(w.data[~mask], snap[name][~mask])  # untouched outside the mask
        assert torch.equal(w.data[mask], snap[name][mask] * factor)
    assert_identical(model, snap)


def test_scale_weights_rejects_bad_masks():
    m = TinyMLP()
    with pytest.raises(KeyError):
        with iv.scale_weights(m, {"nope.weight": torch.ones(1, dtype=torch.bool)}, 0.0):
            pass
    with pytest.raises(ValueError):
        with iv.scale_weights(m, {"fc1.weight": torch.ones(3, 3, dtype=torch.bool)}, 0.0):
            pass
    with pytest.raises(IndexError):
        with iv.zero_channels(m, "fc1", [99]):
            m(torch.randn(1, 8))
    assert iv.count_hooks(m) == 0


def test_steer_add_and_clamp():
    m, x = TinyMLP(), torch.randn(3, 5, 8)
    d = torch.zeros(16)
    d[2] = 2.0
    h = m.fc1(x)
    with iv.steer(m, "fc1", d, 5.0, mode="clamp"):
        out = m.fc1(x)
    assert torch.allclose(out[..., 2], torch.full_like(out[..., 2], 5.0))
    assert torch.equal(out[..., :2], h[..., :2])
    with iv.steer(m, "fc1", d, 1.5, mode="add", positions=[0, 4]):
        out = m.fc1(x)
    assert torch.allclose(out[:, [0, 4], 2], h[:, [0, 4], 2] + 1.5)
    assert torch.equal(out[:, 1:4], h[:, 1:4])
    with pytest.raises(ValueError):
        with iv.steer(m, "fc1", torch.zeros(16), 1.0):
            pass
    with pytest.raises(ValueError):
        with iv.steer(m, "fc1", d, 1.0, mode="multiply"):
            pass
    assert iv.count_hooks(m) == 0


def test_eight_threads_with_conflicting_interventions_never_interleave():
    """Each thread applies its own intervention and must see exactly its solo answer."""
    model = tiny_llama(seed=1)
    snap = snapshot(model)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    names = [n for n, p in model.named_parameters() if n.endswith("proj.weight")]
    gen = torch.Generator().manual_seed(0)
    jobs = []
    for t in range(8):
        name = names[t % len(names)]
        mask = torch.rand(dict(model.named_parameters())[name].shape, generator=gen) > 0.5
        jobs.append((t, name, mask, [0.0, 2.0, 0.5, 1.5][t % 4]))

    def run(t, name, mask, factor):
        with iv.scale_weights(model, {name: mask}, factor), iv.zero_channels(model, "model.layers.1", [t]):
            return model(ids).logits.detach().clone()

    with torch.no_grad():
        solo = {job[0]: run(*job) for job in jobs}
    results, errors = {}, []

    def worker(job):
        try:
            with torch.no_grad():
                for _ in range(5):
                    out = run(*job)
                    if not torch.equal(out, solo[job[0]]):
                        errors.append(job[0])
            results[job[0]] = True
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(job,)) for job in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and len(results) == 8
    assert iv.count_hooks(model) == 0
    assert_identical(model, snap)


def test_lock_is_reentrant_and_per_model():
    a, b = TinyMLP(), TinyMLP(seed=1)
    assert iv.model_lock(a) is iv.model_lock(a) and iv.model_lock(a) is not iv.model_lock(b)
    with iv.locked(a), iv.zero_channels(a, "fc1", [0]):  # nested on the same thread: no deadlock
        got = []
        th = threading.Thread(target=lambda: got.append(iv.model_lock(a).acquire(timeout=0.2)))
        th.start()
        th.join()
        assert got == [False]  # another thread must wait while an intervention is active
        with iv.locked(b):
            pass


def test_hook_count_ignores_transformers_own_output_capturing_hooks():
    """transformers 5 puts output-capturing forward hooks on a model at its first forward that asks
    for hidden states; they belong to the loaded model, so the integrity check must not read them as
    an intervention left behind, while ours still count."""
    lm = tiny_llama(vocab=32, hidden=16, num_attention_heads=2, num_key_value_heads=2)
    lm(torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert sum(len(m._forward_hooks) for m in lm.modules()) > 0  # transformers' own
    assert iv.count_hooks(lm) == 0
    with iv.edit_output(lm, "model.layers.0", lambda h: h):
        assert iv.count_hooks(lm) == 1
    assert iv.count_hooks(lm) == 0
