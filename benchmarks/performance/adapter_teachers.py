"""m LoRA teachers of the installed MiniLM (issue 51): one shared base (`SharedBaseTeachers`, what
`FrozenModels` picks for adapter replicas of one base) against m whole models, one forward each
(`FrozenModels(stack=False)`): the teachers' weights in memory and their samples/s, on the same batches.

    python -m benchmarks.performance.adapter_teachers [--m 4] [--batches 20] [--batch 64] [--tokens 64] [--threads 1]

The m teachers: MiniLM with a 3-class head and the default adapter (rank 8, alpha 16, query and
value), the pretrained weights loaded into each, then each adapter's A and B and each head drawn at
random (as m trained replicas differ). Both paths score the same batches of real tweets; the largest
difference of their mean logits is reported (it must be float rounding). Results:
docs/results/adapter-teachers-results.json and a section of docs/benchmarks/performance.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from typing import Any

from benchmarks.report import RESULTS_DIR, markdown_table, page, write_section

HEADING = "## LoRA teachers on one shared base against m models (MiniLM, CPU)"
RESULTS = RESULTS_DIR / "adapter-teachers-results.json"


def measure(m: int, batches: int, batch: int, tokens: int, threads: int) -> dict[str, Any]:
    import torch

    from workers.data import load_splits
    from workers.data.input_spec import InputSpec
    from workers.data.tokenizer import encode_texts
    from workers.models.adapters import LoraSettings, adapter_parameters
    from workers.models.checkpoints import ModelSettings
    from workers.models.hf import MINILM_DIR, pretrained_state, read_directory
    from workers.models.starting_weights import load_weights
    from workers.teachers.frozen import FrozenModels

    torch.set_num_threads(threads)
    found = read_directory(str(MINILM_DIR))
    inputs = InputSpec(
        "text", tokenizer=found.tokenizer, vocab_size=found.vocab_size, max_length=tokens, add_special_tokens=True
    )
    plain = ModelSettings(f"hf:{MINILM_DIR}", 3, inputs, found.config)
    with_adapter = ModelSettings(plain.arch, 3, inputs, found.config, LoraSettings())
    pretrained = pretrained_state(str(MINILM_DIR))
    generator = torch.Generator().manual_seed(0)
    models = []
    for seed in range(m):
        model = plain.build(seed=seed)
        load_weights(model, pretrained, plain.arch, stem_may_differ=False)
        model = with_adapter.build_adapter(model, seed)
        with torch.no_grad():
            for p in adapter_parameters(model).values():
                p.copy_(0.02 * torch.randn(p.shape, generator=generator))
        models.append(model.eval())
    tweets: Any = load_splits("tweet-sentiment", train_limit=batch * batches).train
    ids, _ = encode_texts(inputs, list(tweets.texts))
    chunks = [ids[i * batch : (i + 1) * batch] for i in range(batches)]

    def weights_mib(tensors: Any) -> float:
        return sum(t.numel() * t.element_size() for t in tensors) / 2**20

    separate = FrozenModels(models, stack=False)
    shared = FrozenModels(models)
    assert shared.shared is not None, "the m adapter models should share their base"
    figures: dict[str, Any] = {
        "weights_mib": {
            "separate": weights_mib(t for model in separate.models for t in model.state_dict().values()),
            "shared": weights_mib(shared.shared.state_dict().values()),
        },
        "samples_per_s": {},
    }
    largest = 0.0
    for name, teachers in (("separate", separate), ("shared", shared)):
        teachers(chunks[0])  # warm-up, not timed
        started = time.perf_counter()
        for chunk in chunks:
            teachers(chunk)
        figures["samples_per_s"][name] = batches * batch / (time.perf_counter() - started)
    for chunk in chunks[:4]:
        largest = max(largest, float((separate(chunk) - shared(chunk)).abs().max()))
    figures["largest_logit_difference"] = largest
    figures["parameters"] = sum(p.numel() for p in models[0].parameters())
    return figures


def report(results: dict[str, Any]) -> str:
    a, f = results["args"], results["figures"]
    rows = [
        [
            name,
            f"{f['weights_mib'][key]:,.1f}",
            f"{f['samples_per_s'][key]:.1f}",
        ]
        for name, key in (
            (f"{a['m']} models, one forward each", "separate"),
            ("one base, m adapters and heads", "shared"),
        )
    ]
    saved = 1 - f["weights_mib"]["shared"] / f["weights_mib"]["separate"]
    speed = f["samples_per_s"]["shared"] / f["samples_per_s"]["separate"]
    return "\n".join(
        [
            f"`python -m benchmarks.performance.adapter_teachers --m {a['m']} --batches {a['batches']} "
            f"--batch {a['batch']} "
            f"--tokens {a['tokens']} --threads {a['threads']}`; {results['date']}, {results['machine']}, torch "
            f"{results['torch']}. {a['m']} LoRA teachers (r8 α16 query,value) of MiniLM ({f['parameters']:,} "
            f"weights each) with 3-class heads scoring tweets cut at {a['tokens']} tokens, batch {a['batch']}. "
            f"One shared base holds {100 * saved:.0f} % less teacher weight and runs at {speed:.2f}× the "
            "samples/s of the m whole models (every layer after the first still computes m times: "
            "the adapters on query and value change what each later layer reads); largest difference "
            f"of the mean logits {f['largest_logit_difference']:.1e}. Both paths ran in one process, one after "
            "the other, so the ratio is of one run. Loading still holds the m whole models until the teachers "
            "are built (each replica's checkpoint carries the base): the saving is what they hold while serving.",
            "",
            markdown_table(["teachers", "weights in memory MiB", "samples/s (mean logits of m)"], rows),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=4)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    figures = measure(args.m, args.batches, args.batch, args.tokens, args.threads)
    results = {
        "args": vars(args),
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {args.threads} thread(s)",
        "torch": torch.__version__,
        "figures": figures,
    }
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_section(page("performance"), HEADING, report(results))
    print(json.dumps(figures))
    print(f"wrote {RESULTS} and docs/benchmarks/performance.md: {HEADING}")


if __name__ == "__main__":
    main()
