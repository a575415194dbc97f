"""The in-process server runs as `python app.py` does: the objects of its start frozen out of the
collector's passes (app.frozen_start). A full pass over them (some 800,000 in a test process) held
the server's event loop for over a second on a quiet 2-core machine, and a client's queue join on a
loaded one waited past httpx's 5-s limit (tests/api/test_call_cap.py, beside a second suite)."""

import gc

from tests.helpers.server import FROZEN_BY_START


def test_the_start_is_frozen_out_of_the_collectors_passes(app_url):
    assert gc.isenabled()
    # this server's own start froze what it made (freezing is process-wide: an earlier server's start
    # in this process would pass a check of the total alone)
    assert FROZEN_BY_START[app_url] > 10_000, FROZEN_BY_START
    frozen = gc.get_freeze_count()
    assert frozen > 300_000, frozen  # the app's start alone is some 450,000 objects
