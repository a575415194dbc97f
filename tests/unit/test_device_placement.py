"""Every tab's loader puts its model on the compute device at load (not inside the marked GPU
functions). No GPU here: WORKBENCH_DEVICE=meta stands in for one, in a separate process so the
shared, loaded-once models of this test process stay on the CPU."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PROBE = r"""
import json, torch
from backend.core.device import device_of, pick_device
from backend.lrp import service as lrp
from backend.sae import loading as sae_loading
from backend.nemo import service as nemo
from backend.mathneuro import service as math
from backend.pissa import service as pissa

out = {"picked": str(pick_device())}
out["relevance"] = [str(device_of(lrp.load_text().model)), str(device_of(lrp.load_image().model))]
org = sae_loading.get_organism("zoo", model=True)  # the tab starts from its metadata; the weights on need
out["features"] = [str(device_of(org.model)), str(org.sae.W_enc.device)]
pipe = nemo.get("zoo").pipe
out["memorization"] = [str(device_of(m)) for m in (pipe.unet, pipe.text_encoder, pipe.vae)]
out["math_neurons"] = [str(device_of(math.bench("zoo").model))]
out["adapters"] = [str(device_of(pissa.get_model(k))) for _, k in pissa.choices("zoo")]
print(json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_loaders_place_models_on_the_picked_device():
    env = {**os.environ, "WORKBENCH_DEVICE": "meta", "OMP_NUM_THREADS": "1"}
    env.pop("WORKBENCH_CHECK_WEIGHTS", None)  # a stand-in device holds no values to fingerprint
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out.pop("picked") == "meta"
    for tab, devices in out.items():
        assert devices and set(devices) == {"meta"}, (tab, devices)


def test_place_is_a_no_op_on_the_cpu():
    import torch

    from backend.core.device import device_of, place

    lin = torch.nn.Linear(2, 2)
    w = lin.weight
    assert place(lin) is lin and lin.weight is w and device_of(lin).type == "cpu"
    assert device_of(torch.nn.ReLU()).type == "cpu"
