"""Bad-input fuzzing of every Gradio endpoint, generic over the endpoint's declared parameters.

For each parameter, values are drawn from what its component declares (gradio_client's view_api):
choices outside the enum, numbers out of range / NaN / ±inf / negative, empty, huge, control-
character, emoji and lone-surrogate text, lists with unknown items, and images that are tiny, huge,
grayscale, RGBA, CMYK, animated, truncated, or not images at all. A call may succeed or answer an
error; what must never happen is a crash: the server stops answering, a handler defect is counted
(components.serving.guard.INTERNAL_ERRORS), a hook stays on a model, or a weight changes.

    python -m tests.load.fuzz --per-family 1000       # the full run (printed)

An endpoint family is the tab that registers the endpoints (components/<tab>/): the issue's
"≥ 1,000 inputs per endpoint family" is counted per tab, spread round-robin over its endpoints.
"""

from __future__ import annotations

import argparse
import io
import itertools
import math
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.load.harness import make_client

TEXTS = [
    "",
    " ",
    "a" * 100_000,
    "word " * 5000,
    "\x00\x01\x02\x1b[31m\x7f",
    "🔬🧠💥" * 50,
    # Non-UTF-8 input as it reaches a server: bytes decoded as Latin-1 (mojibake, C1 controls)
    # and the replacement / non-characters. (Lone surrogates cannot be sent as JSON text.)
    b"\xff\xfe\xc3\x28\x80\x81".decode("latin-1"),
    "\ufffd\ufffe\uffff",
    "null",
    "None",
    "-1",
    "<script>alert(1)</script>",
    "../../etc/passwd",
    "a\nb\r\nc\t",
    "😀",
    "٩(◕‿◕｡)۶ ñ ü 中文 العربية",
    "' OR 1=1 --",
    "%s%s%n",
    "\u202e\u200b\ufeff",
]
NUMBERS = [float("nan"), float("inf"), float("-inf"), -1, -1e9, 0, 1e9, 1e308, -0.0, 0.5, 3.7, 2**63]


def _image_bytes(kind: str, rng: random.Random) -> bytes:
    from PIL import Image

    if kind == "not-an-image":
        return b"this is not an image" * rng.randint(1, 50)
    if kind == "empty":
        return b""
    size = {"tiny": (1, 1), "huge": (4096, 4096), "wide": (2000, 3)}.get(kind, (rng.randint(2, 96),) * 2)
    mode = {"grayscale": "L", "rgba": "RGBA", "cmyk": "CMYK", "palette": "P", "16bit": "I;16"}.get(kind, "RGB")
    img = Image.new(mode, size, color=rng.randint(0, 255) if mode in ("L", "P", "I;16") else None)
    buf = io.BytesIO()
    if kind == "animated":
        frames = [Image.new("RGB", (32, 32), (i * 40, 0, 0)) for i in range(4)]
        frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
        return buf.getvalue()
    fmt = "TIFF" if mode in ("CMYK", "I;16") else "PNG"
    img.save(buf, format=fmt)
    data = buf.getvalue()
    return data[: len(data) // 2] if kind == "truncated" else data


IMAGE_KINDS = [
    "tiny",
    "huge",
    "wide",
    "grayscale",
    "rgba",
    "cmyk",
    "palette",
    "16bit",
    "animated",
    "truncated",
    "not-an-image",
    "empty",
    "normal",
]


@dataclass
class Param:
    name: str
    component: str
    schema: dict
    default: Any = None


def endpoint_params(client) -> dict[str, list[Param]]:
    info = client.view_api(return_format="dict", print_info=False)
    out = {}
    for name, ep in info["named_endpoints"].items():
        out[name] = [
            Param(
                p.get("parameter_name") or "", p.get("component", ""), p.get("type") or {}, p.get("parameter_default")
            )
            for p in ep["parameters"]
        ]
    return out


COMPONENTS = Path(__file__).resolve().parents[2] / "components"


def endpoint_families(names) -> dict[str, list[str]]:
    """Group endpoint names ("/steer") by the tab whose package declares the api_name (components/<tab>/);
    an endpoint no tab declares (Gradio's own, a shared part's) is its own family."""
    owner = {}
    for src in sorted(COMPONENTS.rglob("*.py")):
        rel = src.relative_to(COMPONENTS).parts
        for api in re.findall(r"api_name\s*=\s*[\"']([\w\-]+)[\"']", src.read_text()):
            owner.setdefault("/" + api, rel[0] if len(rel) > 1 else src.stem)
    families: dict[str, list[str]] = {}
    for n in names:
        families.setdefault(owner.get(n, n.strip("/")), []).append(n)
    return families


def draw(p: Param, rng: random.Random, tmp: Path) -> Any:
    """One value for a parameter: mostly hostile, sometimes valid (so deeper code is reached)."""
    comp = p.component.lower()
    schema = p.schema if isinstance(p.schema, dict) else {}
    if comp in ("image", "file", "uploadbutton", "gallery") or "filepath" in str(schema):
        from gradio_client import handle_file

        kind = rng.choice(IMAGE_KINDS)
        path = tmp / f"fuzz-{rng.randrange(10**9)}.{'gif' if kind == 'animated' else 'png'}"
        path.write_bytes(_image_bytes(kind, rng))
        return handle_file(str(path))
    enum = schema.get("enum") or (schema.get("items") or {}).get("enum")
    if schema.get("type") == "array" or comp == "checkboxgroup":
        choices = list(enum or ["x"])
        return rng.choice(
            [
                [],
                [rng.choice(TEXTS)],
                rng.sample(choices, k=min(len(choices), rng.randint(1, 3))),
                choices * 3,
                [None],
                "not a list",
            ]
        )
    if enum:
        return rng.choice(list(enum) * 2 + [rng.choice(TEXTS), None, 7])
    if schema.get("type") in ("number", "integer") or comp in ("slider", "number"):
        lo, hi = 0.0, 100.0
        desc = schema.get("description", "")
        if "between" in desc:
            try:
                lo, hi = (float(x) for x in desc.split("between")[1].split("and"))
            except ValueError:
                pass
        valid = rng.uniform(lo, min(hi, lo + (hi - lo) * 0.3)) if math.isfinite(hi) else lo
        return rng.choice(NUMBERS + [lo, hi, lo - 1, hi + 1, round(valid, 3), int(valid)])
    if schema.get("type") == "boolean" or comp == "checkbox":
        return rng.choice([True, False, None, "yes", 2])
    return rng.choice(TEXTS + [None, 12345, "ok"])


@dataclass
class FuzzReport:
    calls: int = 0
    answered_error: int = 0
    succeeded: int = 0
    crashes: list[str] = field(default_factory=list)
    per_endpoint: dict[str, int] = field(default_factory=dict)
    per_family: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        return (
            f"{self.calls} fuzz calls over {len(self.per_endpoint)} endpoints in "
            f"{len(self.per_family)} families: "
            f"{self.succeeded} answered, {self.answered_error} refused with a message, "
            f"{len(self.crashes)} crashes"
        )


def status(client) -> dict:
    return client.predict(api_name="/status")[1]


def fuzz(
    url: str,
    *,
    per_endpoint: int | None = None,
    per_family: int | None = None,
    seed: int = 0,
    skip: tuple[str, ...] = ("/status",),
    max_seconds_per_endpoint: float = 120.0,
    max_seconds_per_family: float = 900.0,
    progress: bool = False,
) -> FuzzReport:
    """`per_endpoint` calls on each endpoint, or `per_family` calls on each family (round-robin over
    its endpoints); each stops early when its time allowance is spent."""
    rng = random.Random(seed)
    client = make_client(url)
    report = FuzzReport()
    tmp = Path(tempfile.mkdtemp(prefix="wb-fuzz-"))
    before = status(client)["internal_errors"]
    params_of = {n: ps for n, ps in endpoint_params(client).items() if n not in skip}
    families = endpoint_families(params_of)
    if per_family is not None:
        plan = [
            (fam, itertools.islice(itertools.cycle(names), per_family), max_seconds_per_family)
            for fam, names in families.items()
        ]
    else:
        fam_of = {n: fam for fam, names in families.items() for n in names}
        plan = [(fam_of[n], [n] * (per_endpoint or 0), max_seconds_per_endpoint) for n in params_of]
    for family, names, allowance in plan:
        t0 = time.perf_counter()
        for name in names:
            if time.perf_counter() - t0 > allowance:
                break
            params = params_of[name]
            args = [draw(p, rng, tmp) for p in params]
            report.calls += 1
            report.per_endpoint[name] = report.per_endpoint.get(name, 0) + 1
            report.per_family[family] = report.per_family.get(family, 0) + 1
            try:
                job = client.submit(*args, api_name=name)
                job.result(timeout=60)
                report.succeeded += 1
            except Exception as e:
                if type(e).__name__ in ("AppError", "ValueError", "TypeError", "Exception"):
                    report.answered_error += 1  # refused (a gr.Error, a validation error)
                elif "Timeout" in type(e).__name__:
                    job.cancel()
                    report.answered_error += 1
                    # gradio_client reads every job of a client from one stream, and a cancel can end
                    # that stream under the next job (which then sees CancelledError, the client's
                    # doing, not the server's): the next calls go through a client of their own
                    client = make_client(url)
                else:
                    report.crashes.append(f"{name}: client saw {type(e).__name__}: {str(e)[:200]}")
            s = status(client)  # the server must still answer, and stay clean
            if s["internal_errors"] != before:
                report.crashes.append(f"{name}: handler defect with args {repr(args)[:300]}")
                before = s["internal_errors"]
            if s["integrity"]:
                report.crashes.append(f"{name}: {s['integrity']}")
                break
        if progress:
            print(
                f"family {family}: {report.per_family.get(family, 0)} calls in "
                f"{time.perf_counter() - t0:.0f} s, crashes so far {len(report.crashes)}",
                flush=True,
            )
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-family", type=int, default=1000, help="calls per endpoint family (tab)")
    ap.add_argument("--per-endpoint", type=int, default=None, help="instead: calls per endpoint")
    ap.add_argument("--seconds-per-family", type=float, default=3600)
    ap.add_argument("--seconds-per-endpoint", type=float, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tests.helpers.server import serve

    with serve(env={"WORKBENCH_CHECK_WEIGHTS": "1"}) as (url, _):
        t0 = time.perf_counter()
        rep = fuzz(
            url,
            per_endpoint=args.per_endpoint,
            per_family=None if args.per_endpoint else args.per_family,
            seed=args.seed,
            max_seconds_per_endpoint=args.seconds_per_endpoint,
            max_seconds_per_family=args.seconds_per_family,
            progress=True,
        )
    print(rep.summary(), f"in {time.perf_counter() - t0:.0f} s")
    for fam, n in sorted(rep.per_family.items()):
        print(f"family {fam:14s} {n}")
    for name, n in sorted(rep.per_endpoint.items()):
        print(f"  {name:28s} {n}")
    for c in rep.crashes[:50]:
        print("CRASH", c)
    sys.exit(1 if rep.crashes else 0)


if __name__ == "__main__":
    main()
