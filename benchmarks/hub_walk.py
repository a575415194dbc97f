"""Full-size walk of hub mode: the app served on random-weight stand-ins of every paper checkpoint
built from the real configs (nothing downloaded), every tab's main action once, timed, with peak
memory; then whether all five tabs' models fit in the model store together.

    python -m benchmarks.hub_walk --scale width     # the papers' widths, fewer layers (a CPU, ~35 min)
    python -m benchmarks.hub_walk --scale full      # the real configs (a GPU machine)
    python -m benchmarks.hub_walk --scale tiny      # the tests' stand-ins (seconds)
    python -m benchmarks.hub_walk --residency-only  # the residency table alone (no models built)

The stand-ins of tests/helpers/standins (real classes, tokenizers, processors, folder layout) are
written into an offline Hugging Face cache under the real hub ids, then their weights are replaced by
random ones at the sizes of `--scale`; the app (benchmarks/walk_server.py) runs on that cache with
HF_HUB_OFFLINE=1 and WORKBENCH_PRESET=hub, and gradio_client drives it. Each action runs twice: the
first call loads the tab's model (cold), the second runs on it loaded (warm), on another input so
no result cache answers it. Peak RSS is the server's VmHWM during the call (reset before it); with
CUDA the peak GPU memory is sampled from nvidia-smi.

At `--scale width` every language model keeps its real width with 2 layers (the SAE then hooks the
last of them, `model.layers.1`), the CLIP vision tower 3 layers, the UNet is SD-1.4's whole at
64 × 64 latents; vocabularies are the stand-ins' small ones (the embedding and head are not
per-layer work). Per-layer costs carry over to the full depth; totals do not.

The residency part needs no weights: each checkpoint's parameters are counted from its real config
(modules built on the meta device) at the dtype the app loads it in on a GPU, and placeholders of
those byte sizes go through the real model store (backend.core.store) in the walk's order, under
the default budget of an 80 GB GPU and of a 48 GB one: what stays resident, what is evicted, when.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCALES = ("tiny", "width", "full")

# after the path above, so that `python benchmarks/hub_walk.py` finds the package too
from benchmarks.hub_walk_cache import SAE_LATENTS, build_cache, hookpoint_at  # noqa: E402
from benchmarks.hub_walk_cache import WIDEN  # noqa: E402, F401  (benchmarks.hub_walk.WIDEN, as tests use it)
from benchmarks.hub_walk_residency import FIVE_TABS, GB, residency, visitor_index  # noqa: E402


# --------------------------------------------------------------------------- measuring the server
def peak_rss_reset(pid: int) -> None:
    """Reset the process's peak RSS (VmHWM) so the next reading is this call's own peak."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_rss_gb(pid: int) -> float | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / GB
    return None


class GpuSampler:
    """Peak GPU memory used by `pid` while the context is open, from nvidia-smi every 0.2 s."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, None, threading.Event()
        self.available = shutil.which("nvidia-smi") is not None

    def _read(self) -> float | None:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        used = [
            float(m) for p, m in (line.split(",") for line in out.splitlines() if "," in line) if int(p) == self.pid
        ]
        return sum(used) * 2**20 / GB if used else None

    def _loop(self):
        while not self._stop.wait(0.2):
            with contextlib.suppress(Exception):
                v = self._read()
                if v is not None:
                    self.peak = max(self.peak or 0.0, v)

    def __enter__(self):
        if self.available:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.available:
            self._thread.join(timeout=5)


def sample_images(folder: Path, n: int, side: int) -> list[str]:
    """Photos that ship with scikit-image, resized to about `side` px (anyres picks a tile grid by
    aspect ratio, so they differ in shape)."""
    from PIL import Image
    from skimage import data

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for _i, name in enumerate(("astronaut", "coffee", "chelsea", "rocket")[:n]):
        img = Image.fromarray(getattr(data, name)())
        w, h = img.size
        s = side / max(w, h)
        p = folder / f"{name}.png"
        img.resize((max(8, round(w * s)), max(8, round(h * s)))).save(p)
        out.append(str(p))
    return out


# Each tab's main action: (tab, what, call(client, images, i) for the i-th run (0 cold, 1 warm)).
def actions():
    from gradio_client import handle_file

    sentences = ["the plot was dull but the cast was brilliant", "the food was cold but the service was warm"]
    prompts = ["The No Limits Business Woman Podcast", "a photo of a dog on the beach"]

    def relevance(c, imgs, i):
        return c.predict(
            sentences[i],
            ["mambalrp", "gi"],
            ["norm", "silu", "ssm", "gate"],
            "was",
            True,
            "state-spaces/mamba-130m-hf",
            api_name="/explain_text",
        )

    def features(c, imgs, i):
        return c.predict(handle_file(imgs[i]), None, api_name="/analyse_image")

    def contrast(c, imgs, i):  # two photos a set; the warm call pairs them otherwise (activations are kept per set)
        a, b = ([imgs[0], imgs[1]], [imgs[2], imgs[3]]) if i == 0 else ([imgs[0], imgs[2]], [imgs[1], imgs[3]])
        files = lambda ps: [handle_file(p) for p in ps]  # noqa: E731
        return c.predict("", "", files(a), files(b), 64, api_name="/features_contrast")

    def steer_many(c, imgs, i):  # three clamps and one zeroed feature in one intervention, beside each alone
        return c.predict(
            handle_file(imgs[i]), None, 3, 10.0, "10=8, 20=6", "7", "prompt", False, False, api_name="/steer_many"
        )

    def memorization(c, imgs, i):
        return c.predict(prompts[i], api_name="/memo_check")

    def math_(c, imgs, i):  # identify the math parameters, then prune them (cold) or scale them (warm)
        return c.predict("MathNeuro", 3, [0.0, 2.0][i], 8, api_name="/mn_evaluate")

    def adapters(c, imgs, i):
        key = "meta-llama/Llama-2-7b-hf"
        layers = c.predict(key, api_name="/layers")
        listed = layers[0]
        # the i-th listed weight (q_proj, then k_proj of layer 0: the same shape)
        layer = listed["choices"][i][1] if isinstance(listed, dict) and "choices" in listed else listed["value"]
        return c.predict(key, layer, 16, "pissa", api_name="/analyse")

    return [
        ("Relevance", "MambaLRP + Gradient×Input of one sentence (mamba-130m)", relevance),
        ("Features", "one image's SAE features (LLaVA-NeXT-8B + 131k SAE)", features),
        ("Features", "contrast of two sets of 2 photos (the same model and SAE)", contrast),
        ("Features", "3 clamps + 1 zeroed feature: no clamp, each alone, all together", steer_many),
        ("Memorization", "memorization check of one prompt (SD-1.4)", memorization),
        (
            "Math neurons",
            "MathNeuro identification + GSM8K / non-math accuracy with them pruned, then scaled "
            "(Llama-3.2-1B; 16 items of 16 new tokens)",
            math_,
        ),
        ("Adapters", "list Llama-2-7B's weights, analyse one: spectrum, PiSSA vs LoRA init (r = 16)", adapters),
    ]


def walk(url: str, pid: int, images: list[str], log=print) -> list[dict]:
    from gradio_client import Client

    client = Client(url, verbose=False)
    rows = []
    for tab, what, call in actions():
        row = {"tab": tab, "what": what}
        for i, phase in enumerate(("cold", "warm")):
            peak_rss_reset(pid)
            with GpuSampler(pid) as gpu:
                t0 = time.perf_counter()
                try:
                    out = call(client, images, i)
                    row[f"{phase}_result"] = repr(out)[:300]
                    ok = out is not None and (not isinstance(out, (list, tuple)) or any(o is not None for o in out))
                    if not ok:
                        row["error"] = f"{phase}: empty result"
                except Exception as e:  # one failing tab must not hide the others' figures
                    row["error"] = f"{phase}: {type(e).__name__}: {str(e)[:300]}"
                took = time.perf_counter() - t0
            row[f"{phase}_s"] = took
            row[f"{phase}_rss_gb"] = peak_rss_gb(pid)
            row[f"{phase}_gpu_gb"] = gpu.peak
            log(
                f"[{tab} {phase}: {took:.1f} s, peak RSS {row[f'{phase}_rss_gb'] or 0:.2f} GB"
                + (f", {row['error']}" if "error" in row else "")
                + "]"
            )
            if "error" in row:
                break
        row["store"] = store_after(client)
        rows.append(row)
    return rows


def store_after(client) -> dict | None:
    """The running app's model store after an action (the Overview's status endpoint): its budget,
    what it holds and how many models it has evicted so far."""
    try:
        status = client.predict(api_name="/status")[1]
    except Exception:  # the figures above stand without it
        return None
    st = (status or {}).get("model_store") or {}
    return {
        "budget_bytes": st.get("budget_bytes"),
        "resident_bytes": st.get("resident_bytes"),
        "evictions": st.get("evictions"),
        "models": [m["id"] for m in st.get("models", [])],
    }


def server_env(cache: Path, scale: str) -> dict[str, str]:
    from tests.helpers.standins import cache_env

    env = {
        **cache_env(cache),
        "WALK_SAE_HOOKPOINT": hookpoint_at(scale),
        # the GSM8K page scores a few short answers; a question is one generation either way
        "WORKBENCH_MATH_EVAL_ITEMS": "16",
        "WORKBENCH_MATH_NEW_TOKENS": "16",
        "WALK_NEMO_STATS_N": "1000" if scale == "full" else "8",
    }
    if scale != "full":
        env["WORKBENCH_DEVICE"] = "cpu"
    return env


# --------------------------------------------------------------------------- tables
def _size(n: int) -> str:
    return f"{n / GB:.2f} GB" if n >= GB / 10 else f"{n / 10**6:.1f} MB"


def _num(x, fmt="{:.1f}"):
    return "–" if x is None else fmt.format(x)


def walk_table(res: dict) -> str:
    note = {"tiny": "tests' stand-ins", "width": "real widths, 2 LM layers (CPU)", "full": "real configs"}[res["scale"]]
    lines = [
        "| tab | main action | sizes | first call (cold, s) | second call (warm, s) | peak RSS GB | peak GPU GB "
        "| store after: models, bytes (evictions so far) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        gpu = r.get("cold_gpu_gb") or r.get("warm_gpu_gb")
        gpu_s = _num(
            max(v for v in (r.get("cold_gpu_gb"), r.get("warm_gpu_gb")) if v is not None) if gpu is not None else None,
            "{:.2f}",
        )
        if gpu is None and res["scale"] != "full":
            gpu_s = "to re-run on a GPU"
        rss = [v for v in (r.get("cold_rss_gb"), r.get("warm_rss_gb")) if v is not None]
        what = r["what"] + (f" — FAILED: {r['error']}" if "error" in r else "")
        st = r.get("store") or {}
        held = (
            f"{len(st['models'])}, {_size(st['resident_bytes'])} ({st['evictions']})"
            if st.get("models") is not None and st.get("resident_bytes") is not None
            else "–"
        )
        lines.append(
            f"| {r['tab']} | {what} | {note} | {_num(r.get('cold_s'))} | {_num(r.get('warm_s'))} | "
            f"{_num(max(rss) if rss else None, '{:.2f}')} | {gpu_s} | {held} |"
        )
    return "\n".join(lines)


def residency_table(res: dict) -> str:
    lines = ["| tab | checkpoint | parameters | dtype on a GPU | GB |", "|---|---|---|---|---|"]
    for s in res["checkpoints"]:
        lines.append(
            f"| {s['tab']} | {s['checkpoint']} | {s['params'] / 1e9:.3f} B | {s['dtype']} | {s['bytes'] / GB:.2f} |"
        )
    lines.append(
        f"| all five tabs | {', '.join(m.split('/')[-1] for m in FIVE_TABS)} | | | "
        f"**{res['five_tabs_bytes'] / GB:.2f}** |"
    )
    for run in res["runs"]:
        verdict = "fit" if run["five_tabs_fit"] else "do not fit"
        lines += [
            "",
            f"{run['gpu_gb']} GB GPU, default budget {run['budget'] / GB:.1f} GB "
            f"(store.gpu_budget): the five tabs' models {verdict} together.",
            "",
            "| step | loads | evicts | resident after (GB) |",
            "|---|---|---|---|",
        ]
        for i, st in enumerate(run["steps"], 1):
            ev = ", ".join(st["evicted"]) or "—"
            n = len(st["resident"])
            lines.append(f"| {i} | {st['load']} | {ev} | {st['resident_bytes'] / GB:.2f} ({n} model{'s' * (n != 1)}) |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
def load_average() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=SCALES, default=None, help="default: full with a GPU, width without")
    ap.add_argument("--cache", type=Path, default=None, help="where to write the stand-in cache (default: a temp dir)")
    ap.add_argument("--keep-cache", action="store_true", help="reuse --cache if it is already built")
    ap.add_argument(
        "--residency-only", action="store_true", help="only the residency table and the index size (no models built)"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--log", type=Path, default=None, help="the server's log (default: beside the cache)")
    args = ap.parse_args(argv)
    import torch

    scale = args.scale or ("full" if torch.cuda.is_available() else "width")
    out: dict = {
        "scale": scale,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "torch": torch.__version__,
        "load_before": load_average(),
    }
    if not args.residency_only:
        tmp = None
        cache = args.cache
        if cache is None:
            tmp = tempfile.mkdtemp(prefix="hub-walk-")
            cache = Path(tmp) / "hub"
        try:
            t0 = time.perf_counter()
            if not (args.keep_cache and cache.exists()):
                build_cache(cache, scale, log=lambda m: print(m, file=sys.stderr, flush=True))
            out["build_s"] = time.perf_counter() - t0
            images = sample_images(cache.parent / "walk-images", 4, 64 if scale == "tiny" else 600)
            from tests.helpers.server import serve

            log_path = args.log or cache.parent / "walk-server.log"
            with serve(
                env=server_env(cache, scale),
                log_path=log_path,
                app_path=ROOT / "benchmarks" / "walk_server.py",
                python=["nice", "-n", "10", sys.executable] if scale == "width" else None,
            ) as (url, proc):
                out["rows"] = walk(url, proc.pid, images, log=lambda m: print(m, file=sys.stderr, flush=True))
            out["server_evictions"] = [line.strip() for line in log_path.read_text().splitlines() if "evicted" in line]
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
    out["residency"] = residency()
    # the Features tab's own sizes: the tests' stand-in SAE at tiny scale, the lmms-lab SAE otherwise
    out["visitor_index"] = visitor_index(256, 16, k=16) if scale == "tiny" else visitor_index(SAE_LATENTS, 576)
    out["load_after"] = load_average()
    print(
        f"hub walk, scale {scale} — {out['date']}, torch {out['torch']}, "
        f"load {out['load_before']} → {out['load_after']}"
    )
    if "rows" in out:
        print(walk_table(out))
        print()
    print(residency_table(out["residency"]))
    vi = out["visitor_index"]
    quota = "no quota" if vi["quota_bytes"] is None else f"{vi['quota_bytes'] / GB:.2f} GB"
    print(
        f"\nA visitor's own feature index ({vi['latents']} latents × top {vi['top_k']} images × {vi['patches']} "
        f"patches): {vi['bytes'] / GB:.3f} GB on disk (the session quota, WORKBENCH_SESSION_QUOTA: {quota})."
    )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    if any("error" in r for r in out.get("rows", [])):
        sys.exit(1)
    return out


if __name__ == "__main__":
    main()
