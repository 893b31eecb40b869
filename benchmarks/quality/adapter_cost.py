"""What a LoRA adapter costs and saves against full fine-tuning of the installed MiniLM (issue 51):
training samples/s, the process's peak memory, the weights that learn and their optimiser state, and
what a version has to store, measured on the same batches, one process per mode.

    python -m benchmarks.quality.adapter_cost [--steps 30] [--batch 32] [--tokens 64] [--threads 1]

Each mode runs in a fresh process (peak resident memory, `ru_maxrss`, is per process): MiniLM with
a 3-class head, the pretrained weights loaded, AdamW at the hf: recipe's settings (weight decay on
weights only, clip 1), `steps` training steps on real tweets cut at `tokens` tokens (2 warm-up steps
not timed). LoRA: the default adapter (rank 8, alpha 16, query and value). Results:
docs/results/adapter-cost-results.json and a section of docs/benchmarks/quality.md. The table's error rates and flips
of each way (full fine-tuning; LoRA at each rate) come from `python -m benchmarks.quality.adapter_flips`
(docs/results/adapter-flips-results.json): the plain update old → new, mean ± std over its seeds.
`--report-only` rewrites the section from the two results files, measuring nothing.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks.report import RESULTS_DIR, markdown_table, page, write_section

HEADING = "## LoRA adapters against full fine-tuning: cost, errors and flips (MiniLM, CPU)"
RESULTS = RESULTS_DIR / "adapter-cost-results.json"
FLIPS = RESULTS_DIR / "adapter-flips-results.json"  # benchmarks/quality/adapter_flips.py
MODES = ("full", "lora")


def run_mode(mode: str, steps: int, batch: int, tokens: int, threads: int) -> dict[str, Any]:
    """In this process: build, load and train MiniLM `steps` steps as `mode`; its figures."""
    import torch

    from workers.data import load_splits
    from workers.data.input_spec import InputSpec
    from workers.data.tokenizer import encode_texts
    from workers.models.adapters import LoraSettings, adapter_parameters
    from workers.models.checkpoints import ModelSettings
    from workers.models.hf import MINILM_DIR, pretrained_state, read_directory
    from workers.models.starting_weights import load_weights
    from workers.training.config import TrainConfig, make_optimizer, undecayed_names

    torch.set_num_threads(threads)
    found = read_directory(str(MINILM_DIR))
    inputs = InputSpec(
        "text", tokenizer=found.tokenizer, vocab_size=found.vocab_size, max_length=tokens, add_special_tokens=True
    )
    adapter = LoraSettings() if mode == "lora" else None
    settings = ModelSettings(f"hf:{MINILM_DIR}", 3, inputs, found.config)
    model = settings.build(seed=0)
    load_weights(model, pretrained_state(str(MINILM_DIR)), f"hf:{MINILM_DIR}", stem_may_differ=False)
    model = ModelSettings(settings.arch, 3, inputs, found.config, adapter).build_adapter(model)
    model.train()
    config = TrainConfig(optimizer="adamw", lr=1e-4, weight_decay=0.01, weight_decay_on="weights", adapter=adapter)
    optimizer = make_optimizer(model.named_parameters(), config, undecayed_names(model))
    tweets: Any = load_splits("tweet-sentiment", train_limit=batch * (steps + 2)).train  # a held TextSet
    ids, _ = encode_texts(inputs, list(tweets.texts))
    labels = tweets.labels
    trainable = [p for p in model.parameters() if p.requires_grad]

    def step(i: int) -> None:
        window = slice(i * batch, (i + 1) * batch)
        loss = torch.nn.functional.cross_entropy(model(ids[window]), labels[window])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()

    for i in range(2):
        step(i)
    started = time.perf_counter()
    for i in range(2, steps + 2):
        step(i)
    seconds = time.perf_counter() - started
    state_bytes = sum(
        t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)
    )
    every = sum(p.numel() for p in model.parameters())
    stored = adapter_parameters(model) if adapter else dict(model.named_parameters())
    head = sum(p.numel() for n, p in model.named_parameters() if n.startswith("model.classifier."))
    return {
        "mode": mode,
        "samples_per_s": steps * batch / seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "parameters": every,
        "trainable": sum(p.numel() for p in trainable),
        "optimizer_state_mib": state_bytes / 2**20,
        "own_weights_mib": (sum(p.numel() for p in stored.values()) + (head if adapter else 0)) * 4 / 2**20,
        "checkpoint_mib": sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 2**20,
    }


def cost_cells(r: dict[str, Any]) -> list[str]:
    """One mode's cost: samples/s, peak RSS, the weights that learn, AdamW state, own weights, checkpoint."""
    return [
        f"{r['samples_per_s']:.1f}",
        f"{r['peak_rss_mib']:,.0f}",
        f"{r['trainable']:,} ({100 * r['trainable'] / r['parameters']:.2f} %)",
        f"{r['optimizer_state_mib']:.2f}",
        f"{r['own_weights_mib']:.2f}",
        f"{r['checkpoint_mib']:.1f}",
    ]


def flip_cells(flips: dict[str, Any] | None, way: str) -> list[str]:
    """ER_old, ER_new and NFR (mean ± std %) of `way`'s plain update in the flips record; [] without one."""
    if flips is None:
        return []
    scores = flips["ways"][way]
    return [f"{100 * scores[key][0]:.2f} ± {100 * scores[key][1]:.2f}" for key in ("er_old", "er_new", "nfr")]


def flips_sentence(flips: dict[str, Any]) -> str:
    """Where the error and flip columns come from."""
    mode, sizes = flips["mode"], flips["mode"]["train_sizes"]
    return (
        f" ER and NFR: `{flips['command']}` ({flips['date']}, {flips['seeds']} seeds, {FLIPS}), the plain update "
        f"old ({sizes[1]:,} tweets) → new ({sizes[2]:,}) scored on {flips['n_eval']:,} eval tweets, {mode['epochs']} "
        f"epochs at {mode['max_length']} tokens, the rest of the hf: recipe; full fine-tuning at lr {mode['full_lr']}."
    )


def against_full(flips: dict[str, Any]) -> str:
    """Each LoRA rate's ER_new and NFR against full fine-tuning's, in points (from the means)."""
    full = flips["ways"]["full fine-tuning"]
    parts = []
    for rate in flips["rates"]:
        way = flips["ways"][f"LoRA lr {rate:g}"]
        parts.append(
            f"at lr {rate:g} ER_new {100 * (way['er_new'][0] - full['er_new'][0]):+.2f} pt and NFR "
            f"{100 * (way['nfr'][0] - full['nfr'][0]):+.2f} pt (val ER_new {100 * way['val_er_new'][0]:.2f} %)"
        )
    return (
        f" Against full fine-tuning (val ER_new {100 * full['val_er_new'][0]:.2f} %), LoRA has "
        + "; ".join(parts)
        + "."
    )


def ways(flips: dict[str, Any] | None) -> list[tuple[str, str, str]]:
    """(row name, cost mode, flips way) of each row: full fine-tuning, then LoRA at each rate of the record."""
    lora = "LoRA r8 α16 query,value"
    if flips is None:
        return [("full fine-tuning", "full", ""), (lora, "lora", "")]
    rates = [(f"{lora}, lr {rate:g}", "lora", f"LoRA lr {rate:g}") for rate in flips["rates"]]
    return [("full fine-tuning", "full", "full fine-tuning"), *rates]


def report(results: dict[str, Any], flips: dict[str, Any] | None = None) -> str:
    by = {r["mode"]: r for r in results["modes"]}
    full, lora = by["full"], by["lora"]
    rows = [[name, *cost_cells(by[mode]), *flip_cells(flips, way)] for name, mode, way in ways(flips)]
    flip_headers = ["ER_old %", "ER_new %", "NFR old → new %"] if flips else []
    a = results["args"]
    return "\n".join(
        [
            f"`python -m benchmarks.quality.adapter_cost --steps {a['steps']} --batch {a['batch']} "
            f"--tokens {a['tokens']} "
            f"--threads {a['threads']}`; {results['date']}, {results['machine']}, torch {results['torch']}. MiniLM "
            f"(all-MiniLM-L6-v2, {full['parameters']:,} weights) with a 3-class head on tweets cut at {a['tokens']} "
            f"tokens, batch {a['batch']}, AdamW, each mode in its own process. LoRA trains at "
            f"{lora['samples_per_s'] / full['samples_per_s']:.2f}× full fine-tuning's samples/s here (the frozen "
            "base still runs forward and backward to the adapters; only the weight gradients and their AdamW "
            "update are saved), and a version's own weights are the adapter and the head."
            + (flips_sentence(flips) + against_full(flips) if flips else ""),
            "",
            markdown_table(
                [
                    "mode",
                    "samples/s",
                    "peak RSS MiB",
                    "weights that learn",
                    "AdamW state MiB",
                    "the version's own weights MiB",
                    "checkpoint MiB (base + adapter)",
                    *flip_headers,
                ],
                rows,
            ),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--flips", type=Path, default=FLIPS, help="the adapter fidelity mode's results.json")
    parser.add_argument("--report-only", action="store_true", help="rewrite the section from the results files")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one mode, in the child
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(run_mode(args.mode, args.steps, args.batch, args.tokens, args.threads)))
        return
    flips = json.loads(args.flips.read_text()) if args.flips.exists() else None
    if args.report_only:
        write_section(page("quality"), HEADING, report(json.loads(RESULTS.read_text()), flips))
        print(f"wrote docs/benchmarks/quality.md: {HEADING}")
        return
    import torch

    modes = []
    for mode in MODES:
        argv = [sys.executable, "-m", "benchmarks.quality.adapter_cost", "--mode", mode]
        argv += ["--steps", str(args.steps), "--batch", str(args.batch), "--tokens", str(args.tokens)]
        done = subprocess.run([*argv, "--threads", str(args.threads)], capture_output=True, text=True, check=True)
        modes.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{mode}: {modes[-1]}", flush=True)
    results = {
        "args": {key: getattr(args, key) for key in ("steps", "batch", "tokens", "threads")} | {"mode": None},
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {args.threads} thread(s)",
        "torch": torch.__version__,
        "modes": modes,
    }
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_section(page("quality"), HEADING, report(results, flips))
    print(f"wrote {RESULTS} and docs/benchmarks/quality.md: {HEADING}")


if __name__ == "__main__":
    main()
