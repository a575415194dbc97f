"""The sequential greedy search, run on batches of speculative evaluations with the same result.

A greedy pass visits a fixed list of moves; each move proposes a trial from the current state (or
none), an evaluation of the trial decides whether it becomes the state, and the next proposal depends
on that decision. Here the next moves are proposed as if each went the way most decisions of this
pass went so far, the trials of one such guess are evaluated in one call, and the decisions are
committed in order up to the first one that went the other way (its trial was proposed from the true
state, so its decision holds too); the pass then resumes after it. Every committed decision is the
sequential pass's own, in its order, so the result is the same; what a wrong guess costs is the
batch's remaining evaluations.

A checker without `similarities` (a plain `similarity(spec)`) runs the sequential pass unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

Propose = Callable[[Any, Any], Any]  # (state, move) → trial, or None (no evaluation: rejected)


def batched(checker) -> bool:
    return hasattr(checker, "similarities") and getattr(checker, "groups", 1) > 1


def greedy(
    checker,
    state,
    moves: Sequence,
    propose: Propose,
    threshold: float,
    on_accept: Callable[[Any, Any], None] | None = None,
    batch: int | None = None,
    state_sim: float | None = None,
):
    """Visit `moves` in order; a trial is accepted when its SSIM is strictly below `threshold`
    (the official comparison). `state_sim`: the SSIM of `state`, when known. Returns the final
    state and its SSIM (None when unknown).

    Guesses: a move evaluated before from another state (a batch's evaluations past its first wrong
    guess) is predicted to change the SSIM by what it changed then, a first-order estimate that
    holds while its neighbours' effects add up; a move never evaluated goes the majority's way."""
    if not batched(checker):
        for move in moves:
            trial = propose(state, move)
            if trial is not None and checker.similarity(trial) < threshold:
                state = trial
                if on_accept:
                    on_accept(move, state)
        return state, None
    batch = batch or checker.groups
    delta: dict[int, float] = {}
    i, yes, no = 0, 0, 0
    while i < len(moves):
        # plan: j → (trial, guess, parent) where parent is the planned move the trial was proposed
        # from (-1: the committed state)
        plan: dict[int, tuple[Any, bool, int]] = {}
        s, s_sim, parent, j = state, state_sim, -1, i
        while j < len(moves) and len(plan) < batch:
            trial = propose(s, moves[j])
            if trial is not None:
                pred = s_sim + delta[j] if (j in delta and s_sim is not None) else None
                guess = pred < threshold if pred is not None else yes > no
                plan[j] = (trial, guess, parent)
                if guess:
                    s, s_sim, parent = trial, pred, j
            j += 1
        sims = dict(zip(plan, checker.similarities([p[0] for p in plan.values()]).tolist())) if plan else {}
        for m, (_, _, par) in plan.items():  # what each evaluated move changed, for later guesses
            base = state_sim if par < 0 else sims[par]
            if base is not None:
                delta[m] = sims[m] - base
        k = i
        while k < j:
            trial = propose(state, moves[k])
            k += 1
            if trial is None:
                continue
            planned, guessed, _ = plan.get(k - 1, (None, None, None))
            if trial != planned:  # cannot happen while every earlier guess held
                raise AssertionError("speculative search left the sequential path")
            sim = checker.conclude(trial, checker.settle(trial, sims[k - 1], threshold))
            ok = sim < threshold
            yes, no = yes + ok, no + (not ok)
            if ok:
                state, state_sim = trial, sim
                if on_accept:
                    on_accept(moves[k - 1], state)
            if ok != guessed:
                break
        i = k
    return state, state_sim


def first_below(checker, specs: Sequence, threshold: float) -> tuple[int, list[float]]:
    """Evaluate `specs` in order until one's SSIM is ≤ `threshold` → (its index or −1, the SSIMs of
    those evaluated up to it), in batches of the checker's size; the sequential search's answer."""
    sims: list[float] = []
    if not batched(checker):
        for i, spec in enumerate(specs):
            sims.append(checker.similarity(spec) if spec else 1.0)
            if sims[-1] <= threshold:
                return i, sims
        return -1, sims
    i = 0
    while i < len(specs):
        chunk = list(specs[i : i + checker.groups])
        got = checker.similarities([s for s in chunk if s]).tolist()
        it = iter(got)
        for spec in chunk:
            if spec:
                sim = checker.conclude(spec, checker.settle(spec, next(it), threshold))
            else:
                sim = 1.0
            sims.append(sim)
            if sim <= threshold:
                return i, sims
            i += 1
    return -1, sims
