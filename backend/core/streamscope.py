"""A model-store request scope over a stream (`scoped_iter`, `scoped_aiter`): components.serving.guard
wraps every streaming handler in one, so no model the stream uses is evicted before it ends. Apart
from the store because they only drive a `store.Scope` and own none of its state."""

from __future__ import annotations

from typing import AsyncIterator, Callable, Iterable, Iterator

from .store import Scope


def scoped_iter(iterable: Iterable, tell: Callable[[list[str]], None] | None = None) -> Iterator:
    """Iterate a stream under one scope, entered afresh at each step (steps may run in different
    threads and contexts, so a context variable set at the first step is not seen at the next).
    `tell(notes)` hears the scope's new notes after each step."""
    scope = Scope()
    it = iter(iterable)
    told = 0
    try:
        while True:
            with scope.active():
                try:
                    x = next(it)
                except StopIteration:
                    return
            if tell is not None and len(scope.notes) > told:
                tell(scope.notes[told:])
                told = len(scope.notes)
            yield x
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            with scope.active():
                close()
        scope.close()


async def scoped_aiter(aiterable, tell: Callable[[list[str]], None] | None = None) -> AsyncIterator:
    """`scoped_iter` for an async stream."""
    scope = Scope()
    it = aiterable.__aiter__()
    told = 0
    try:
        while True:
            with scope.active():
                try:
                    x = await it.__anext__()
                except StopAsyncIteration:
                    return
            if tell is not None and len(scope.notes) > told:
                tell(scope.notes[told:])
                told = len(scope.notes)
            yield x
    finally:
        aclose = getattr(it, "aclose", None)
        if aclose is not None:
            with scope.active():
                await aclose()
        scope.close()
