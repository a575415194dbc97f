from concurrent.futures import ThreadPoolExecutor


def test_status_endpoint_reports_device_models_and_caches(client):
    table, status, summary = client.predict(api_name="/status")
    assert "model(s) loaded" in summary and "integrity checks: no problems found" in summary
    assert status["preset_source"] == "zoo"
    assert "cpu" in status["device"] or "cuda" in status["device"]
    assert isinstance(status["caches"], list) and isinstance(status["models"], list)
    for c in status["caches"]:
        assert c["bytes"] <= c["max_bytes"]


def test_parallel_clients_get_answers(app_url):
    from gradio_client import Client

    def one(_):
        return Client(app_url, verbose=False).predict(api_name="/status")[1]["preset_source"]

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, range(4))) == ["zoo"] * 4
