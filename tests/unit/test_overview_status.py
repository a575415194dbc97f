"""The Overview's model table (components.overview.layout.system_status, the `status` endpoint): a
registered checkpoint a tab has loaded shows as loaded, and only once."""

import app
from backend.core import presets, store, weights
from components.overview.layout import runtime_summary, system_status


def test_a_loaded_preset_shows_as_loaded_in_its_own_row():
    app.build_app("zoo")  # registers every tab's checkpoints
    preset = presets.active("relevance", "zoo")
    key = weights.key(preset)
    was_loaded = key in store.loaded()
    weights.model(preset)
    try:
        status = system_status("zoo")
        rows = [m for m in status["models"] if m["id"] == preset.path_or_id]
        assert rows == [
            {
                "tab": "relevance",
                "source": "zoo",
                "id": preset.path_or_id,
                "class": preset.model_class.rsplit(".", 1)[-1],
                "state": "loaded",
            }
        ]
        # other tests in this process may have loaded their own models: those are "(picked)" rows,
        # but the preset must not be one of them
        picked = [m for m in status["models"] if m["tab"] == "(picked)"]
        assert all(m["id"] != preset.path_or_id for m in picked)
        held = sum(weights.key(p) in store.loaded() for p in presets.presets())  # this process's loaded presets
        assert runtime_summary(status).startswith(f"{held + len(picked)} model(s) loaded")
    finally:
        if not was_loaded:
            store.evict(key)
