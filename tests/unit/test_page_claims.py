"""What a page claims holds for what it shows: a stopped race says where it stopped and compares
only the steps every run completed; convert calls outputs the same only within the dtype's bound; the
Memorization type (VM/TM) is shown only beside "memorized"."""

from __future__ import annotations

from types import SimpleNamespace

from backend.pissa.race import summarize
from components.adapters.race import _status


def _run(method, seed, losses):
    # summarize reads a run's method, seed, losses and trainable params only
    return SimpleNamespace(method=method, seed=seed, losses=list(losses), params=[])


def test_a_stopped_race_compares_the_steps_every_run_completed():
    # stopped inside step 3: PiSSA seed 0 ran step 3 (a big spike), LoRA seed 0 did not
    runs = [_run("lora", 0, [2.0, 1.5]), _run("pissa", 0, [1.8, 1.2, 9.0])]
    s = summarize(runs, planned=300, lr=1e-3, rank=4, alpha=4.0)
    assert s["steps_run"] == 2 and s["steps_planned"] == 300
    assert s["loss_at_steps_run"]["pissa"]["0"] == 1.2  # step 2, not the unmatched step 3
    assert "final_loss" not in s  # a stopped race's last losses are not its final ones
    assert s["pissa_beats_lora"] == {"seeds": 1, "wins": 1}
    text = _status({}, {"stopped": True, "summary": s}, 1.0, 600)
    assert "Race **stopped** at step 2 of 300." in text
    assert "below LoRA's at step 2 (of the 300 planned)" in text and "at the end" not in text


def test_a_finished_race_says_at_the_end_and_one_stopped_before_a_step_compares_nothing():
    runs = [_run("lora", 0, [2.0, 1.5]), _run("pissa", 0, [1.8, 1.2])]
    s = summarize(runs, planned=2, lr=1e-3, rank=4, alpha=4.0)
    text = _status({}, {"stopped": False, "summary": s}, 1.0, 4)
    assert "at the end for **1/1** seeds" in text and "at step" not in text
    s0 = summarize([_run("lora", 0, []), _run("pissa", 0, [])], planned=300, lr=1e-3, rank=4, alpha=4.0)
    text = _status({}, {"stopped": True, "summary": s0}, 0.1, 600)
    assert "Race **stopped** at step 0 of 300: nothing to compare yet." in text and "below LoRA" not in text


def _conversion(rel, change_rel, dtype="bfloat16"):
    import torch

    from backend.pissa.conversion import conversion_tolerance

    scale = 8.16
    return {
        "layers": ["model.layers.0.self_attn.v_proj"],
        "steps": 20,
        "rank": 8,
        "converted_rank": 16,
        "n_inputs": 32,
        "max_abs_diff": rel * scale,
        "rel_diff": rel,
        "output_scale": scale,
        "dtype": dtype,
        "tolerance": conversion_tolerance(getattr(torch, dtype)),
        "roundoff_at_init": 0.02,
        "change_from_base": change_rel * scale,
    }


def test_convert_says_the_same_outputs_only_within_the_dtypes_bound():
    from components.adapters.convert import conversion_md

    # an own bf16 Qwen2: outputs 0.36 apart (4.4e-2 relative) are not "the same outputs"
    md = conversion_md(_conversion(4.4e-2, 0.5))
    assert "3.59e-01" in md and "**the same outputs**" not in md
    assert "**close, but not the same outputs**" in md and "4 machine epsilons of bfloat16" in md
    # as far off as the fine-tuning moved them: a wrong conversion
    assert "**NOT the same outputs!**" in conversion_md(_conversion(4.4e-2, 5e-2))
    # two epsilons of bfloat16 (a 32-layer model's round-off is about 2.5): the same
    assert "**the same outputs**" in conversion_md(_conversion(2 * 2**-7, 0.5))
    assert "**the same outputs**" not in conversion_md(_conversion(5e-3, 0.5, "float16"))


def _check_result(memorized, listed_type):
    return {
        "score": 0.3,
        "theta_mem": 0.43,
        "memorized": memorized,
        "listed_type": listed_type,
        "max_z": 2.0,
        "detection": None,
    }


def test_the_memorization_type_is_a_dash_beside_not_memorized():
    from components.memorization.figures import score_html, type_shown

    # the paper lists the caption as VM, but this model does not memorize it: no type beside the verdict
    card = score_html(_check_result(False, "VM"))
    assert "not memorized" in card and type_shown(card, "VM") == "—"
    assert type_shown(score_html(_check_result(True, "TM")), "TM") == "TM"
    assert type_shown(score_html(_check_result(True, None)), None) == "—"  # memorized, not on the list
    assert type_shown(None, "VM") == "—"  # no check shown


def test_the_overview_says_not_downloaded_for_hub_checkpoints_it_cannot_load(monkeypatch, tmp_path):
    import huggingface_hub.constants as C

    from backend.core import picker, presets
    from components.overview import layout as overview

    monkeypatch.setattr(C, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(C, "HF_HUB_CACHE", str(tmp_path))  # an empty cache
    rows = overview._model_table("zoo")
    hub = [r for r in rows if r[1] == "hub"]
    assert hub, "the zoo app registers the papers' checkpoints too"
    assert all(r[4] == picker.NOT_CACHED for r in hub), hub
    assert all(r[4] in ("loaded", "active", "available") for r in rows if r[1] == "zoo")
    # one in the cache is available again
    p = next(p for p in presets.presets() if p.source == "hub")
    snap = tmp_path / f"models--{p.path_or_id.replace('/', '--')}" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (tmp_path / f"models--{p.path_or_id.replace('/', '--')}" / "refs").mkdir()
    (tmp_path / f"models--{p.path_or_id.replace('/', '--')}" / "refs" / (p.revision or "main")).write_text("abc")
    row = next(r for r in overview._model_table("zoo") if r[2] == p.path_or_id)
    assert row[4] == "available"


def test_nemos_fallback_is_said_plainly():
    from components.memorization.figures import relaxed_words

    words = relaxed_words(0.428, 0.512)
    assert "0.512" in words and "0.428" in words and "do not remove it" in words
    for jargon in ("SSIM", "θ", "reached 1", "refined", "official code"):
        assert jargon not in words
