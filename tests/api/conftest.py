"""The app launched in-process on 127.0.0.1 and driven by gradio_client."""
import pytest

from tests.helpers.server import free_port


@pytest.fixture(scope="session")
def app_url():
    import app

    demo = app.build_app("zoo")
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **app.launch_kwargs())
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        demo.close()


@pytest.fixture(scope="session")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)
