"""Cost of one MambaLRP explanation against plain Gradient×Input, measured in the same run.

    OMP_NUM_THREADS=1 python benchmarks/lrp.py [--tokens 128] [--repeats 5] [--skip-130m]

Models: the zoo sentiment organism, and a random model with state-spaces/mamba-130m-hf's config
(24 layers, d_model 768, d_inner 1536, d_state 16, vocab 50280) at `--tokens` tokens.
Baselines:
- GI (transformers): the model's own forward + autograd, the way one would write Gradient×Input
  against transformers (its selective scan is a Python loop, also in the backward pass);
- GI (fast forward): backend.lrp's forward without rules (the same graph as MambaLRP minus the
  detaches) through captum's InputXGradient — the like-for-like comparison;
- IG-32: captum Integrated Gradients with 32 steps.
Target: ratio MambaLRP / GI ≤ 1.3.

Then the same mamba-130m-config model as a user's own folder (saved with a byte-level BPE tokenizer
under a temporary allowed root), picked and loaded through the Relevance tab's service (picker,
store, preset loader) and explained there (`service.explain_text`, MambaLRP, a 128-token text):
its time against transformers' own forward of the same tokens, measured in the same run
(target ≤ 1.5).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.lrp import attribute_text  # noqa: E402


def interleaved(fns: dict, repeats: int) -> dict:
    """Median wall time of each function, run in interleaved rounds (A, B, C, A, B, C, …) so a
    change in machine load hits every method alike."""
    for f in fns.values():
        f()  # warm-up
    ts = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            ts[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in ts.items()}


def gi_transformers(model, ids, target):
    emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    out = model(inputs_embeds=emb, use_cache=False).logits[0, -1, target]
    (g,) = torch.autograd.grad(out, emb)
    return (emb * g).sum(-1)


def bench(name: str, model, ids: torch.Tensor, target: int, repeats: int, ig: bool = True) -> dict:
    model.eval().requires_grad_(False)
    fns = {
        "mambalrp": lambda: attribute_text(model, ids, target=target, method="mambalrp"),
        "gi_fast": lambda: attribute_text(model, ids, target=target, method="gi"),
        "gi_transformers": lambda: gi_transformers(model, ids, target),
    }
    r = interleaved(fns, repeats)
    with torch.no_grad():
        r["forward_transformers"] = interleaved({"f": lambda: model(ids, use_cache=False)}, repeats)["f"]
    if ig:
        r["ig32"] = interleaved(
            {"ig": lambda: attribute_text(model, ids, target=target, method="ig")}, max(1, repeats // 2)
        )["ig"]
    print(f"\n== {name}: {ids.shape[1]} tokens ==")
    for k, v in r.items():
        print(f"  {k:22s} {v * 1000:9.1f} ms")
    print(f"  MambaLRP / GI (fast forward)   = {r['mambalrp'] / r['gi_fast']:.3f}   (target ≤ 1.3)")
    print(f"  MambaLRP / GI (transformers)   = {r['mambalrp'] / r['gi_transformers']:.3f}   (target ≤ 1.3)")
    if ig:
        print(f"  IG-32 / MambaLRP               = {r['ig32'] / r['mambalrp']:.1f}")
    return r


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-130m", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    from backend.lrp import models

    zoo = models.load(models.TEXT_ZOO)
    words = zoo.heldout[0]["words"]
    ids = torch.tensor([zoo.tokenizer.convert_tokens_to_ids(["<bos>"] + words + [zoo.task["query"]])])
    bench("zoo mamba-sentiment", zoo.model, ids, zoo.tokenizer.convert_tokens_to_ids("positive"), args.repeats)

    if not args.skip_130m:
        from transformers import MambaConfig, MambaForCausalLM

        cfg = MambaConfig(
            vocab_size=50280,
            hidden_size=768,
            state_size=16,
            num_hidden_layers=24,
            intermediate_size=1536,
            conv_kernel=4,
            time_step_rank=48,
            use_conv_bias=True,
            residual_in_fp32=True,
        )
        model = MambaForCausalLM(cfg)
        ids = torch.randint(0, cfg.vocab_size, (1, args.tokens))
        bench("random model, mamba-130m config", model, ids, 42, args.repeats)
        picked_path(model, args.tokens, args.repeats)


def picked_path(model, tokens: int, repeats: int) -> None:
    """Explain through the tab's own path a model picked as a user's folder; ratio to the forward."""
    import os
    import tempfile

    from backend.lrp import service as svc
    from tests.helpers.standins.relevance import english_lines, write_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["WORKBENCH_MODEL_ROOTS"] = tmp
        folder = Path(tmp) / "my-mamba-130m"
        folder.mkdir()
        write_tokenizer(folder)
        model.save_pretrained(folder)
        t0 = time.perf_counter()
        m = svc.load_text("zoo", str(folder))
        load_s = time.perf_counter() - t0
        words = " ".join(english_lines(400)).split()
        ids = m.tokenizer(" ".join(words), return_tensors="pt").input_ids[0, :tokens]
        text = m.tokenizer.decode(ids)
        n = len(svc.text_ids(m, text)[0])
        ids = torch.tensor([svc.text_ids(m, text)[0].tolist()])

        def explain():
            svc.CACHE.clear()  # every round computes
            svc.explain_text(m, text, ["mambalrp"])

        def forward():
            with torch.no_grad():
                m.model(ids, use_cache=False)

        r = interleaved({"explain (tab service)": explain, "forward (transformers)": forward}, repeats)
        print(f"\n== your own folder, mamba-130m config, picked and loaded in {load_s:.1f} s: {n} tokens ==")
        for k, v in r.items():
            print(f"  {k:24s} {v * 1000:9.1f} ms")
        ratio = r["explain (tab service)"] / r["forward (transformers)"]
        print(f"  explain / transformers forward = {ratio:.3f}   (target ≤ 1.5)")
        os.environ.pop("WORKBENCH_MODEL_ROOTS", None)


if __name__ == "__main__":
    main()
