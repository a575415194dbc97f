"""The whole app in hub mode, as a Space runs it, on tiny stand-ins of every hub checkpoint placed in
an offline Hugging Face cache under the real hub ids (tests/helpers/standins): the app is served
from a child process with HF_HUB_OFFLINE=1 and WORKBENCH_PRESET=hub, and nothing else differs.

Two servers: `hub_server` runs every call in its own process; `hub_forked_server` runs as on a
ZeroGPU Space, with the stand-in `spaces` package (tests/helpers/zerogpu) whose GPU runs every
marked call in a forked child with pickled arguments and results. `any_server` / `any_client` are
each of the two in turn, so the suite that uses them passes under both process models."""

import pytest

from tests.conftest import ROOT, artifact
from tests.helpers.server import serve
from tests.helpers.standins import build_cache, cache_env

# A GSM8K evaluation generates up to 256 tokens per answer for 200 items: on the 2-core CPU the
# stand-in's first page load would take minutes, so the walk scores 16 items of 16 tokens.
SMALL_MATH = {"WORKBENCH_MATH_EVAL_ITEMS": "16", "WORKBENCH_MATH_NEW_TOKENS": "16"}


@pytest.fixture(scope="package")
def hub_cache(tmp_path_factory):
    return build_cache(tmp_path_factory.mktemp("hf") / "hub")


@pytest.fixture(scope="package")
def hub_server(hub_cache):
    log = artifact("hub-server.log")
    with serve(env={**cache_env(hub_cache), **SMALL_MATH}, log_path=log) as (url, _proc):
        yield url, log


@pytest.fixture(scope="package")
def hub_own_models(tmp_path_factory):
    """A folder with one user's own model (standins.lms' Qwen2, as a user saves it), made an allowed
    root of the forked server."""
    from tests.helpers.standins import build_local, lms

    return build_local(tmp_path_factory.mktemp("own-models"), {"own-qwen2": lms.LOCAL["own-qwen2"]})


@pytest.fixture(scope="package")
def hub_forked_server(hub_cache, hub_own_models, tmp_path_factory):
    """(url, log, workers): `workers` gets one line per GPU worker started."""
    log = artifact("hub-zerogpu-server.log")
    workers = tmp_path_factory.mktemp("zerogpu") / "workers.log"
    env = {
        **cache_env(hub_cache),
        **SMALL_MATH,
        "PYTHONPATH": str(ROOT / "tests" / "helpers" / "zerogpu"),
        "WORKBENCH_FAKE_SPACES_LOG": str(workers),
        "WORKBENCH_MODEL_ROOTS": str(hub_own_models),
    }
    with serve(env=env, log_path=log) as (url, _proc):
        yield url, log, workers


@pytest.fixture(scope="package")
def hub_client(hub_server):
    from gradio_client import Client

    return Client(hub_server[0], verbose=False)


@pytest.fixture(scope="package", params=["in-process", "forked"])
def any_server(request):
    """(url, log) of the in-process server, then of the forked-worker one."""
    server = request.getfixturevalue("hub_server" if request.param == "in-process" else "hub_forked_server")
    return server[0], server[1]


@pytest.fixture(scope="package")
def any_client(any_server):
    from gradio_client import Client

    return Client(any_server[0], verbose=False)
