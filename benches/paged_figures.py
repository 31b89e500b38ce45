"""Figures for ``docs/transformers.md``, "Paged engine": what a step of
:class:`chunked_prefill.hf.PagedEngine` costs on the test suite's tiny model, and the share
of it spent in the serving scheduler (``schedule()`` + ``update()``).

Three workloads on each backend: an ample pool, a shared 128-token prefix (prefix caching),
and a pool so small that requests are preempted; each with one padded forward pass per step
and with ``separate_decodes=True``. Each run is checked against the first one's outputs.

Run (needs the ``hf`` extra)::

    PYTHONPATH=python python benches/paged_figures.py            # both backends if bound
    PYTHONPATH=python python benches/paged_figures.py --backend pure --prompts 32

It prints a Markdown table; no file is written.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import statistics
import sys
import time
from types import ModuleType
from typing import Any

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

from chunked_prefill import hf

BACKENDS = {"rust": "chunked_prefill._core", "pure": "chunked_prefill.pure_serving"}


def tiny_llama(seed: int = 0, hidden: int = 64, layers: int = 2) -> Any:
    """A random Llama built here (no download, no eos), fp32, vocab 128; the defaults are the
    test suite's model: 2 layers, hidden 64."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    return LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call]


def workload(n: int, prefix: int, seed: int = 1) -> list[list[int]]:
    """``n`` prompts of 16 to 256 tokens after ``prefix`` shared ones."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randint(0, 128, (prefix,), generator=gen).tolist()
    lengths = torch.randint(16, 257, (n,), generator=gen).tolist()
    return [shared + torch.randint(0, 128, (k,), generator=gen).tolist() for k in lengths]


def backends(name: str | None) -> list[ModuleType]:
    found = []
    for key, module_name in BACKENDS.items():
        if name not in (None, key):
            continue
        module = importlib.import_module(module_name)
        if hasattr(module, "ServingScheduler"):
            found.append(module)
        else:
            print(f"skipping {key}: {module_name} has no ServingScheduler", file=sys.stderr)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=sorted(BACKENDS))
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = tiny_llama()
    new = args.new_tokens
    runs = {
        "ample pool": (0, 2048),
        "shared 128-token prefix": (128, 2048),
        "small pool (preemptions)": (0, 48),
    }
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}, {args.prompts} prompts of 16-256 tokens, {new} new "
        "tokens each; ServingConfig(block_size=16, token_budget=256, chunk_size=64, "
        "max_prefills_per_step=4, max_running=64)\n"
    )
    print(
        "| workload | backend | passes | steps | preemptions | cached tokens | step ms (median) "
        "| step ms (p90) | scheduler µs/step (median) | scheduler share | tokens/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, (prefix, blocks) in runs.items():
        prompts = workload(args.prompts, prefix)
        first: list[list[int]] | None = None
        for module, separate in [(m, s) for s in (False, True) for m in backends(args.backend)]:
            config = module.ServingConfig(
                num_blocks=blocks,
                block_size=16,
                token_budget=256,
                chunk_size=64,
                max_prefills_per_step=4,
                max_running=64,
            )
            engine = hf.PagedEngine(model, config, backend=module, separate_decodes=separate)
            t0 = time.perf_counter()
            out = engine.generate(prompts, max_new_tokens=new)
            wall = time.perf_counter() - t0
            first = first or out
            assert out == first, "the backends disagree"
            steps = engine.last_steps
            durations = sorted(s.duration_s for s in steps)
            sched = statistics.median(s.scheduler_s for s in steps)
            share = sum(s.scheduler_s for s in steps) / sum(durations)
            tokens = sum(s.prefill_tokens + s.decode_tokens for s in steps)
            name = module.__name__.split(".")[-1]
            passes = "decodes apart" if separate else "one"
            print(
                f"| {label} | {name} | {passes} | {len(steps)} "
                f"| {engine.scheduler.num_preemptions} "
                f"| {engine.scheduler.num_cached_tokens} "
                f"| {statistics.median(durations) * 1e3:.2f} "
                f"| {durations[int(0.9 * (len(durations) - 1))] * 1e3:.2f} "
                f"| {sched * 1e6:.0f} | {share:.1%} | {tokens / wall:.0f} |"
            )


if __name__ == "__main__":
    main()
