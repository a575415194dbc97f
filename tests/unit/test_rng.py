import threading

import torch

from backend.core.rng import seeded


def test_seeded_sections_are_reproducible_across_threads_and_restore_state():
    with seeded(5):
        ref5 = torch.randn(256)
    with seeded(9):
        ref9 = torch.randn(256)
    state = torch.random.get_rng_state()
    bad = []

    def work(seed, ref):
        for _ in range(50):
            with seeded(seed):
                a = torch.randn(128)
                b = torch.randn(128)  # a second draw inside the section: still nobody else's
            if not torch.equal(torch.cat([a, b]), ref):
                bad.append(seed)

    threads = [threading.Thread(target=work, args=(s, r)) for s, r in [(5, ref5), (9, ref9)] * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []
    assert torch.equal(torch.random.get_rng_state(), state)
