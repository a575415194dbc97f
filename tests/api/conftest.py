"""The app launched in-process on 127.0.0.1 and driven by gradio_client.

Every api test is followed by an integrity check of every model the app has loaded: no hook left
on it and every weight bit-identical to the loaded one, whether the endpoint succeeded or failed.
Every test that drives the app through `client` runs with the ZeroGPU boundary check on
(backend.core.zerogpu): the outermost marked call of each request, a model-touching handler, pickles
its arguments and results as ZeroGPU's worker queue would.
"""

import os

import pytest

from tests.helpers.server import in_process

os.environ["WORKBENCH_CHECK_WEIGHTS"] = "1"


@pytest.fixture(scope="package")
def local_models(tmp_path_factory):
    """A folder of the "your own model" stand-ins (standins.LOCAL), made an allowed root of the app
    while the api tests run (the roots are read at each request)."""
    from tests.helpers.standins import build_local

    root = build_local(tmp_path_factory.mktemp("own-models"))
    old = os.environ.get("WORKBENCH_MODEL_ROOTS")
    os.environ["WORKBENCH_MODEL_ROOTS"] = str(root)
    yield root
    if old is None:
        os.environ.pop("WORKBENCH_MODEL_ROOTS", None)
    else:
        os.environ["WORKBENCH_MODEL_ROOTS"] = old


@pytest.fixture(scope="package")
def app_url(local_models):
    from backend.mathneuro import service as math_service

    # a stand-in's GSM8K answers are noise at any length: 16 tokens, not 256 (the answer rules are
    # tested in tests/unit/test_mathneuro_hub.py)
    with in_process() as url, pytest.MonkeyPatch.context() as mp:
        mp.setattr(math_service, "MATH_NEW_TOKENS", 16)
        yield url


@pytest.fixture(scope="package")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


@pytest.fixture(autouse=True)
def zerogpu_boundary(request, monkeypatch):
    if "client" in request.fixturenames:
        from backend.core import zerogpu

        monkeypatch.setattr(zerogpu, "_CHECK", True)
    yield


@pytest.fixture(autouse=True)
def models_untouched():
    yield
    from backend.core import store

    assert store.integrity_problems() == []


@pytest.fixture(scope="package")
def mcp_url():
    """The app with its MCP tools in this process, as `app.py --mcp` serves it (one for the package's
    MCP tests: tests/api/test_mcp*.py, test_large_images.py); yields its URL."""
    pytest.importorskip("mcp")
    with in_process(mcp=True) as url:
        yield url
