"""PNG exports drawn by several threads at once (visitors' and tabs' model calls run side by side):
each must come out whole. Matplotlib is not thread-safe, so components.mpl hands pyplot to one
thread at a time."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image

from components.adapters import spectrum as adapter_spectrum


def _analysis(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    sv = np.sort(rng.random(64))[::-1] * 10 ** rng.uniform(0, 3)  # log axes: mathtext tick labels
    return {
        "singular_values": sv.tolist(),
        "residual_singular_values": (sv[8:] * 0.5).tolist(),
        "rank": 8,
        "layer": f"layer{seed}",
        "w_sample": rng.normal(size=500).tolist(),
        "w_res_sample": rng.normal(size=500).tolist(),
    }


def _draw_many(tmp_path, n=16):
    def one(i):
        path = tmp_path / f"a{i}.png"
        adapter_spectrum._analysis_png(_analysis(i), path)
        return Image.open(path).size

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, range(n)))


def test_exports_drawn_at_once_all_come_out(tmp_path):
    sizes = _draw_many(tmp_path)
    assert len(set(sizes)) == 1 and sizes[0][0] > 500
