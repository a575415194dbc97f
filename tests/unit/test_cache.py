import threading

import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from backend.core.cache import ByteLRUCache, all_caches, make_key, nbytes


def test_nbytes_counts_buffers():
    assert nbytes(torch.zeros(10, 10)) == 400
    assert nbytes(np.zeros(8, dtype=np.float64)) == 64
    assert nbytes(b"abcd") == 4
    assert nbytes({"a": torch.zeros(4)}) >= 16


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(64, 4096), sizes=st.lists(st.integers(0, 600), min_size=1, max_size=60))
def test_cache_never_exceeds_byte_budget(budget, sizes):
    cache = ByteLRUCache(budget, name="prop")
    for i, n in enumerate(sizes):
        cache.put(f"k{i}", bytes(n))
        assert cache.bytes <= budget
        assert cache.bytes == sum(len(v) for v, _ in cache._data.values())
    last = f"k{len(sizes) - 1}"
    assert (last in cache) == (sizes[-1] <= budget)


def test_lru_order_and_stats():
    cache = ByteLRUCache(300, name="lru")
    for k in "abc":
        cache.put(k, bytes(100))
    assert cache.get("a") is not None  # a is now most recent; b is the oldest
    cache.put("d", bytes(100))
    assert "b" not in cache and {"a", "c", "d"} <= set(cache._data)
    assert cache.get("b") is None
    s = cache.stats()
    assert (s["hits"], s["misses"], s["evictions"], s["entries"], s["bytes"]) == (1, 1, 1, 3, 300)
    assert cache in all_caches()


def test_value_larger_than_budget_is_returned_not_stored():
    cache = ByteLRUCache(10)
    assert cache.get_or_compute("big", lambda: bytes(100)) == bytes(100)
    assert "big" not in cache and cache.bytes == 0


def test_get_or_compute_computes_once():
    cache = ByteLRUCache(1000)
    calls = []
    for _ in range(3):
        assert cache.get_or_compute("k", lambda: calls.append(1) or "v") == "v"
    assert len(calls) == 1 and cache.hits == 2


def test_keys_separate_model_revision_input_and_settings():
    x = torch.arange(6.0).reshape(2, 3)
    base = make_key("m", x, {"rules": ["norm", "ssm"]})
    assert base == make_key("m", x.clone(), {"rules": ["norm", "ssm"]})
    assert base != make_key("m2", x, {"rules": ["norm", "ssm"]})
    assert base != make_key("m", x, {"rules": ["norm", "ssm"]}, revision="r1")
    assert base != make_key("m", x + 1, {"rules": ["norm", "ssm"]})
    assert base != make_key("m", x.reshape(3, 2), {"rules": ["norm", "ssm"]})
    assert base != make_key("m", x.double(), {"rules": ["norm", "ssm"]})
    assert base != make_key("m", x, {"rules": ["norm"]})
    assert make_key("m", "text", {"a": 1, "b": 2}) == make_key("m", "text", {"b": 2, "a": 1})


def test_cache_is_thread_safe():
    cache = ByteLRUCache(5000)

    def work(t):
        for i in range(300):
            cache.put(f"{t}-{i % 40}", bytes(50 + i % 7))
            cache.get(f"{(t + 1) % 8}-{i % 40}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert cache.bytes <= 5000
    assert cache.bytes == sum(len(v) for v, _ in cache._data.values())
