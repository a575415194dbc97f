"""The ZeroGPU boundary check (WORKBENCH_ZEROGPU_CHECK=1): the outermost marked call pickles its
arguments and results as ZeroGPU's worker queue would; nested marked calls run directly."""

import threading

import pytest

from backend.core import zerogpu


@pytest.fixture
def check(monkeypatch):
    monkeypatch.setattr(zerogpu, "_CHECK", True)


def test_unpicklable_arguments_and_results_are_named(check):
    @zerogpu.gpu(duration=10)
    def service(x):
        return x

    assert service(3) == 3
    with pytest.raises(zerogpu.BoundaryError, match="arguments"):
        service(lambda: 0)
    with pytest.raises(zerogpu.BoundaryError, match="arguments"):
        service(threading.Lock())

    @zerogpu.gpu(duration=10)
    def returns_lock():
        return threading.Lock()

    with pytest.raises(zerogpu.BoundaryError, match="result"):
        returns_lock()


def test_nested_marks_run_directly(check):
    @zerogpu.gpu(duration=10)
    def inner(model_like):
        return 1

    @zerogpu.gpu(duration=10)
    def handler(x):
        return inner(threading.Lock()) + x  # a lock is fine inside the worker

    assert handler(1) == 2


def test_generators_check_each_item_and_close_the_inner_one(check):
    closed = []

    @zerogpu.gpu(duration=10)
    def stream(n):
        try:
            for i in range(n):
                yield i
            yield threading.Lock()
        finally:
            closed.append(True)

    g = stream(5)
    assert [next(g) for _ in range(3)] == [0, 1, 2]
    g.close()
    assert closed == [True]
    with pytest.raises(zerogpu.BoundaryError, match="yielded"):
        list(stream(1))


def test_without_the_check_nothing_is_pickled(monkeypatch):
    monkeypatch.setattr(zerogpu, "_CHECK", False)

    @zerogpu.gpu(duration=10)
    def service(x):
        return x

    lock = threading.Lock()
    assert service(lock) is lock


def test_a_result_off_the_cpu_is_refused(check):
    import torch

    @zerogpu.gpu(duration=10)
    def meta():
        return {"t": torch.empty(2, device="meta")}

    with pytest.raises(zerogpu.BoundaryError, match="result.*tensor on meta"):
        meta()
