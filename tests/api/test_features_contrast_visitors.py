"""The Features tab's contrast of two uploaded image sets, by visitors at once through gradio_client:
each visitor gets its own images back and the numbers of its own sets (one on the zoo model, one on
its own LLaVA-NeXT + SAE, the hub preset's classes), never the other's; the CSV each is handed is
named for its session. A visitor's uploads for a contrast count against one allowance per person,
as an index build's do (components.serving.upload_allowance), however many sessions the person
opens; the several-clamps steering answers on LLaVA-NeXT through the API too."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from backend.core.sessions import key_of

pytestmark = pytest.mark.timeout(600)
NEXT_VLM, NEXT_SAE, NEXT_HOOK = "own-llava-next", "own-llava-next-sae", "model.layers.24"


def pixels(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def image_sets(folder: Path, seed: int) -> tuple[list[str], list[str]]:
    from tests.helpers.standins.features import sample_images

    return (
        [str(p) for p in sample_images(folder / "a", 3, seed=seed)],
        [str(p) for p in sample_images(folder / "b", 3, seed=seed + 100)],
    )


def rows(table) -> list:
    return table["data"] if isinstance(table, dict) else table


def test_two_visitors_contrast_their_own_sets_at_once(app_url, local_models, tmp_path):
    from gradio_client import Client, handle_file

    from backend.sae import contrast as C
    from backend.sae import loading
    from components.serving import exports

    sets = {"zoo": image_sets(tmp_path / "zoo-visitor", 1), "next": image_sets(tmp_path / "next-visitor", 2)}
    vlm, sae = str(local_models / NEXT_VLM), str(local_models / NEXT_SAE)

    def visit(who: str) -> dict:
        c = Client(app_url, verbose=False)
        try:
            if who == "next":  # this visitor's own LLaVA-NeXT and SAE, for this session only
                c.predict(vlm, sae, NEXT_HOOK, api_name="/features_load")
            a, b = sets[who]
            out = c.predict(
                "red",
                "blue",
                [handle_file(p) for p in a],
                [handle_file(p) for p in b],
                64,
                api_name="/features_contrast",
            )
            return {"session": c.session_hash, "out": out, "client": c}
        except Exception:
            c.close()
            raise

    with ThreadPoolExecutor(2) as pool:
        seen = dict(zip(("zoo", "next"), pool.map(visit, ("zoo", "next"))))
    try:
        orgs = {
            "zoo": loading.get_organism("zoo"),
            "next": loading.get_organism(loading.own_source(vlm, sae, NEXT_HOOK)),
        }
        own_csvs = {}
        for who, other in (("zoo", "next"), ("next", "zoo")):
            head, _plot, table, gallery, csv = seen[who]["out"]
            assert "Sets: your images" in head and "tested features" in head
            # every image shown is one of the visitor's own uploads, none of the other's
            mine = [pixels(p) for p in sets[who][0] + sets[who][1]]
            theirs = [pixels(p) for p in sets[other][0] + sets[other][1]]
            assert gallery
            for item in gallery:
                shown = pixels(item["image"])
                assert any(shown.shape == m.shape and np.array_equal(shown, m) for m in mine), item["caption"]
                assert not any(shown.shape == t.shape and np.array_equal(shown, t) for t in theirs)
            # the numbers are those of the visitor's own sets on its own model
            a, b = sets[who]
            want = C.contrast_images(orgs[who], [pixels(p) for p in a], [pixels(p) for p in b], rows=500)
            tested = [r for r in want["rows"] if r["tested"]]
            got = pd.read_csv(csv)
            assert list(got["feature"]) == [r["feature"] for r in tested]
            np.testing.assert_allclose(got["p"], [r["p"] for r in tested], rtol=1e-9)
            np.testing.assert_allclose(got["effect"], [r["effect"] for r in tested], atol=1e-12)
            assert [int(r[0]) for r in rows(table)] == [r["feature"] for r in tested][: len(rows(table))]
            assert got.shape[0] == want["n_tested"] and want["n_features"] == orgs[who].n_features
            # the server's copy of the CSV is named for this visitor's session, and holds its numbers
            copies = list(
                exports.cache_root().glob(f"{exports.PREFIX}{key_of(seen[who]['session'])}-*/features-contrast.csv")
            )
            digest = hashlib.sha256(Path(csv).read_bytes()).hexdigest()
            assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in copies].count(digest) == 1
            own_csvs[who] = digest
        assert orgs["zoo"].n_features != orgs["next"].n_features or own_csvs["zoo"] != own_csvs["next"]
        for who, other in (("zoo", "next"), ("next", "zoo")):  # no copy of one's CSV under the other's session
            theirs = exports.cache_root().glob(f"{exports.PREFIX}{key_of(seen[other]['session'])}-*/*.csv")
            assert own_csvs[who] not in {hashlib.sha256(p.read_bytes()).hexdigest() for p in theirs}

        # the several-clamps steering on the LLaVA-NeXT visitor's own model, through the API
        c = seen["next"]["client"]
        frame, out = c.predict(
            handle_file(sets["next"][0][1]), None, 3, 40.0, "10=30", "7", "prompt", False, False, api_name="/steer_many"
        )
        assert [r[0] for r in rows(frame)] == [
            "no clamp",
            "3 = 40 alone",
            "10 = 30 alone",
            "3 = 40 + 10 = 30 (all together)",
        ]
        assert out["suppressed"] == [7] and out["hookpoint"] == orgs["next"].hookpoint
        assert out["together"]["caption"] != out["baseline"]["caption"]
        # no hook is left on either model and every weight is as loaded: the package's models_untouched
    finally:
        for s in seen.values():
            s["client"].close()


def test_one_persons_sessions_share_one_upload_allowance_for_contrast_sets(app_url, tmp_path, monkeypatch):
    """Sessions are free to make: the images a contrast uploads count against the person's allowance
    (WORKBENCH_UPLOAD_ALLOWANCE) as an index build's do, so a second session from the same address
    is refused its upload once the first's used the allowance; a visitor at another address is not."""
    import httpx
    from gradio_client import Client, handle_file

    from tests.helpers.people import as_person

    rng = np.random.default_rng(5)
    files = []
    for i in range(6):  # noise: ~12 kB each, so a request's framing is small beside it
        p = tmp_path / f"noise-{i}.png"
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(p)
        files.append(str(p))
    one_run = sum(Path(p).stat().st_size for p in files)
    monkeypatch.setenv("WORKBENCH_UPLOAD_ALLOWANCE", f"{int(one_run * 1.5)}B")
    here = as_person()
    first, second = Client(app_url, verbose=False, headers=here), Client(app_url, verbose=False, headers=here)
    elsewhere = Client(app_url, verbose=False)
    try:

        def contrast(c):
            return c.predict(
                "red",
                "blue",
                [handle_file(p) for p in files[:3]],
                [handle_file(p) for p in files[3:]],
                64,
                api_name="/features_contrast",
            )

        assert "Sets: your images" in contrast(first)[0]
        with pytest.raises(httpx.HTTPStatusError) as refused:
            contrast(second)
        assert refused.value.response.status_code == 413
        assert "over a visitor's allowance" in refused.value.response.text
        assert "Sets: your images" in contrast(elsewhere)[0]
    finally:
        for c in (first, second, elsewhere):
            c.close()
