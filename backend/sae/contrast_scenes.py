"""Zoo scene recipes for a contrast: set A and set B picked from the organism's scenes by a concept
filter ("red" vs "blue", "circle" vs "square", "red circle" vs "blue circle"), and the features the
organism's concept explainer planted each concept in, to check a contrast against.

    sets = scene_sets(org, "red", "blue", n=64)          # ids and specs of the two sets
    result = contrast_scenes(org, "red", "blue", n=64)   # the sets, their activations, the contrast

A scene spec (backend.sae.scenes) lists objects with a colour, shape, texture and position; a filter
of several concepts ("striped red circle") asks for one object that has them all.
"""

from __future__ import annotations

from typing import Sequence

from ..core import bounds
from ..core.zerogpu import capped, gpu
from . import contrast as C
from . import scenes as S
from .organism import PLANTED_MIN_IOU, Organism, concept_carriers

SOURCES = ("heldout", "index")  # the captioner's held-out scenes (256), the index's scene set (2048)
NO_SCENES = (
    "this model has no scene recipes (concept filters pick the zoo organism's synthetic scenes): "
    f"give both sets as your own images, {bounds.CONTRAST_IMAGES.lo:g} to {bounds.CONTRAST_IMAGES.hi:g} each"
)


def known_concepts() -> str:
    return ", ".join(f"{fam}: {', '.join(cs)}" for fam, cs in S.FAMILIES.items())


def parse_filter(text: str) -> tuple[str, ...]:
    """The concepts of a filter text, one per family at most ("striped red circle top left")."""
    words = str(text or "").strip().lower().split()
    if not words:
        raise ValueError(f"name a concept for each set; the scenes know {known_concepts()}")
    found: list[str] = []
    i = 0
    while i < len(words):
        two = " ".join(words[i : i + 2])
        if two in S.POSITIONS:  # positions are two words
            found.append(two)
            i += 2
        elif words[i] in S.CONCEPTS:
            found.append(words[i])
            i += 1
        else:
            raise ValueError(f"unknown concept {words[i]!r}; the scenes know {known_concepts()}")
    fams = [S.FAMILY_OF[c] for c in found]
    if len(set(fams)) != len(fams):
        raise ValueError(
            f"{text!r} names two {next(f for f in fams if fams.count(f) > 1)}s for one object; "
            "an object has one of each"
        )
    return tuple(found)


def matches(spec: dict, concepts: Sequence[str]) -> bool:
    """Whether one object of the scene has every concept of the filter."""
    return any(
        all(c in (o["colour"], o["shape"], o["texture"], o["position"]) for c in concepts) for o in spec["objects"]
    )


def _specs(org: Organism, source: str) -> list[dict]:
    bounds.check_choice("The scene source", source, SOURCES)
    specs = org.heldout_specs if source == "heldout" else org.index_specs
    if org.is_hub or not specs:
        raise ValueError(NO_SCENES)
    return specs


def scene_sets(
    org: Organism, concept_a: str, concept_b: str, *, n: int = 64, source: str = "heldout", exclusive: bool = True
) -> dict:
    """Up to `n` scenes of each concept filter, the first in the source's order (deterministic).
    `exclusive`: a scene that matches both filters is in neither set (a scene in both sets would be
    compared with itself, and a red-and-blue scene says nothing about red against blue)."""
    n = bounds.check_whole(bounds.CONTRAST_IMAGES, n)
    specs = _specs(org, source)  # first: a model without scenes is told so, not that a filter is unknown
    fa, fb = parse_filter(concept_a), parse_filter(concept_b)
    if fa == fb:
        raise ValueError(f"both sets ask for {' '.join(fa)!r}: choose two different filters")
    in_a = [i for i, s in enumerate(specs) if matches(s, fa) and not (exclusive and matches(s, fb))]
    in_b = [i for i, s in enumerate(specs) if matches(s, fb) and not (exclusive and matches(s, fa))]
    for name, filt, ids in (("A", fa, in_a), ("B", fb, in_b)):
        if len(ids) < bounds.CONTRAST_IMAGES.lo:
            raise ValueError(
                f"set {name} ({' '.join(filt)}) matches {len(ids)} of the {len(specs)} {source} scenes"
                f"{' without the other set' + chr(39) + 's concept' if exclusive else ''}; "
                f"at least {bounds.CONTRAST_IMAGES.lo:g} are needed"
            )
    ids_a, ids_b = in_a[:n], in_b[:n]
    return {
        "concept_a": " ".join(fa),
        "concept_b": " ".join(fb),
        "source": source,
        "exclusive": bool(exclusive),
        "ids_a": ids_a,
        "ids_b": ids_b,
        "available_a": len(in_a),
        "available_b": len(in_b),
        "specs_a": [specs[i] for i in ids_a],
        "specs_b": [specs[i] for i in ids_b],
        "captions_a": [S.caption(specs[i]) for i in ids_a],
        "captions_b": [S.caption(specs[i]) for i in ids_b],
    }


def concept_features(org: Organism, concept: str, min_iou: float = PLANTED_MIN_IOU) -> list[int]:
    """organism.concept_carriers of a concept the scenes know."""
    if concept not in S.CONCEPTS:
        raise ValueError(f"unknown concept {concept!r}; the scenes know {known_concepts()}")
    return concept_carriers(org.labels, concept, min_iou)


def _scenes_seconds(org: Organism, concept_a, concept_b, *args, n: int = 64, **kwargs) -> float:
    return capped(2 * C._set_seconds(org, int(n)))


@gpu(duration=_scenes_seconds)
def contrast_scenes(
    org: Organism, concept_a: str, concept_b: str, *, n: int = 64, source: str = "heldout", exclusive: bool = True, **kw
) -> dict:
    """The two recipe sets, their activations (computed, or read from the index where it holds every
    value) and their contrast; rows say which filter's planted features they are."""
    sets = scene_sets(org, concept_a, concept_b, n=n, source=source, exclusive=exclusive)
    acts = []
    for key in ("a", "b"):
        read = C.index_activations(org, sets[f"ids_{key}"]) if source == "index" and org.index is not None else None
        acts.append(read.acts if read is not None and read.complete else C.scene_activations(org, sets[f"specs_{key}"]))
    out = C.contrast(org, acts[0], acts[1], **kw)
    planted = {c: concept_features(org, c) for c in (*parse_filter(concept_a), *parse_filter(concept_b))}
    for r in out["rows"]:
        r["planted_for"] = [c for c, fs in planted.items() if r["feature"] in fs]
    sets = {k: v for k, v in sets.items() if not k.startswith("specs_")}
    return {**out, **sets, "planted": planted, "acts_a": acts[0], "acts_b": acts[1]}
