"""Each test client stands for a person of its own, as each did when a session was a visitor.

The app counts a visitor's queue places, turns, disk and uploads per person (components.serving.people):
the address its proxy reports. The suite's servers trust one proxy hop (WORKBENCH_PROXY_HOPS=1,
set in tests/conftest.py), and each gradio_client Client and each browser context says it comes
from an address of its own (IPv6's documentation prefix, so no address is anybody's), so tests of
two visitors are two people, as on a Space. A test of one person with many sessions gives its
clients one address (`as_person`)."""

from __future__ import annotations

import itertools

_NEXT = itertools.count(1)
HEADER = "X-Forwarded-For"


def new_address() -> str:
    return f"2001:db8::{next(_NEXT):x}"


def as_person(address: str | None = None) -> dict[str, str]:
    """Headers that make a client the person at `address` (a new one when None)."""
    return {HEADER: address or new_address()}


def one_person_per_client() -> None:
    """Every gradio_client Client made without its own X-Forwarded-For gets a new address."""
    from gradio_client import Client

    init = Client.__init__
    if getattr(init, "_wb_person", False):
        return

    def person_init(self, *args, headers=None, **kwargs):
        headers = dict(headers or {})
        if not any(k.lower() == HEADER.lower() for k in headers):
            headers.update(as_person())
        init(self, *args, headers=headers, **kwargs)

    person_init._wb_person = True
    Client.__init__ = person_init
