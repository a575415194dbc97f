"""The whole app in hub mode, as a Space runs it, on tiny stand-ins of every hub checkpoint placed in
an offline Hugging Face cache under the real hub ids (tests/helpers/standins): the app is served
from a child process with HF_HUB_OFFLINE=1 and WORKBENCH_PRESET=hub, and nothing else differs."""
import pytest

from tests.conftest import ARTIFACTS
from tests.helpers.server import serve
from tests.helpers.standins import build_cache, cache_env


@pytest.fixture(scope="session")
def hub_cache(tmp_path_factory):
    return build_cache(tmp_path_factory.mktemp("hf") / "hub")


@pytest.fixture(scope="session")
def hub_server(hub_cache):
    ARTIFACTS.mkdir(exist_ok=True)
    log = ARTIFACTS / "hub-server.log"
    # A GSM8K evaluation generates up to 256 tokens per answer for 200 items: on the 2-core CPU the
    # stand-in's first page load would take minutes, so the walk scores 16 items of 16 tokens.
    env = {**cache_env(hub_cache), "WORKBENCH_MATH_EVAL_ITEMS": "16", "WORKBENCH_MATH_NEW_TOKENS": "16"}
    with serve(env=env, log_path=log) as (url, _proc):
        yield url, log


@pytest.fixture(scope="session")
def hub_client(hub_server):
    from gradio_client import Client

    return Client(hub_server[0], verbose=False)
