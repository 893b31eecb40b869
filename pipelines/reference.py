"""The spec reference, generated from the pydantic models of pipelines/spec.py.

    python -m pipelines.reference > docs/spec-reference.md

Each section is one model: its docstring, then key | type | default | allowed values | meaning,
read from the fields' annotations, defaults, constraints and descriptions. tests/test_docs.py checks
that the committed file matches this output.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from pipelines import defaults, spec

MODELS: tuple[type[BaseModel], ...] = (
    spec.UpdateSpec,
    spec.DataSpec,
    spec.MethodSpec,
    spec.TrainSpec,
    spec.AdapterSpec,
    spec.DistillInputsSpec,
    spec.ResourcesSpec,
    spec.WorkerResources,
    spec.StudentResources,
    spec.ReplicaResources,
    spec.PromoteSpec,
    spec.TuneSpec,
    spec.RangeSpec,
    spec.TokenizerSpec,
)

# Not generated: the settings a fine-tuning (`init`) wants, and the measurements that chose them.
FINE_TUNING = """## Settings for fine-tuning (`init`)

Fine-tuning needs no settings of its own: keep the architecture's learning rate from scratch and the
cosine schedule over the same epochs, without warm-up (`warmup_epochs: auto` adds none for plain
training). Measured with `python -m benchmarks.fidelity.fine_tuning` (3 seeds, no treatment, new model from
the old version's weights, `init: old`, against the same model from scratch; docs/benchmarks/fidelity.md,
"Fine-tuning from the deployed weights"):

| data, arch | start | lr | ER % | NFR % against old |
|---|---|---|---|---|
| Fashion-MNIST 5k → 10k, small-cnn | scratch | 0.05 | 21.83 ± 0.25 | 3.02 ± 0.46 |
| | from old | 0.05 | 19.65 ± 0.79 | 2.59 ± 0.17 |
| | from old | 0.01 | 23.67 ± 0.61 | 1.85 ± 0.21 |
| | from old | 0.002 | 26.32 ± 0.53 | 1.60 ± 0.24 |
| tweets 13.6k → 27.3k, text-bag | scratch | 2.0 | 31.40 ± 0.37 | 9.16 ± 0.18 |
| | from old | 2.0 | 30.26 ± 0.38 | 2.53 ± 0.28 |
| | from old | 0.4 | 32.73 ± 0.21 | 1.28 ± 0.21 |
| | from old | 0.08 | 33.56 ± 0.27 | 1.06 ± 0.17 |

- At the learning rate from scratch, fine-tuning is better on both counts: ER −2.2 pt and NFR 0.86×
  on Fashion-MNIST, ER −1.1 pt and NFR 0.28× on tweets.
- A lower rate keeps the model nearer the old one: fewer flips, but its ER climbs back toward the old
  model's (at 1/5 of the rate its ER is above the model from scratch on both data sets). Lower it only when
  flips matter more than the accuracy gain, and gate the result (`promote`).
- Every method from either start is the fidelity benchmark's fine-tuning table
  (`python -m benchmarks.fidelity --mode fine-tuning` and `--mode fine-tuning-text`, 3 seeds;
  docs/benchmarks/fidelity.md, "Reading the fine-tuning tables"). KD toward the old model, from its
  weights, flips least: 0.85 % on Fashion-MNIST and 0.98 % on tweets, against 1.94 % and 3.42 % for
  plain fine-tuning, at ER +3.3 and +1.2 pt.
  ELODI's replicas, all fine-tuned from one model, hardly differ, and ELODI from the old weights flips about as
  much as plain fine-tuning (1.97 % and 3.87 %).
- `freeze: backbone` trains the head alone (the trainable count is logged per training); the head of
  a model for another class count starts fresh, so give it the epochs a head needs.
"""


def _anchor(model: type[BaseModel]) -> str:
    return f"[{model.__name__}](#{model.__name__.lower()})"


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: `int`, `one of a, b`, `DataSpec`, `… or null`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{json.dumps(a) if isinstance(a, bool) else a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping {type_name(args[0])} → {type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _anchor(annotation)
    return getattr(annotation, "__name__", str(annotation))


def constraints(metadata: list[Any]) -> str:
    """`≥ 1`, `< 1`, `at most 64 characters`, `matches ^…$` from a field's metadata."""
    words = []
    for item in metadata:
        for attr, symbol in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None and isinstance(item, getattr(annotated_types, attr.capitalize())):
                words.append(f"{symbol} {value}")
        if isinstance(item, annotated_types.MinLen):
            words.append(f"at least {item.min_length} items")
        if isinstance(item, annotated_types.MaxLen):
            words.append(f"at most {item.max_length} characters")
        pattern = getattr(item, "pattern", None)
        if pattern:
            words.append(f"matches `{pattern}`")
    return ", ".join(words)


RECIPE_FIELDS = set(defaults.GENERIC.train_fields())  # TrainSpec fields the architecture fills in


def default_text(field: Any, model: type[BaseModel] | None = None, name: str = "") -> str:
    if model is spec.TrainSpec and name in RECIPE_FIELDS:
        return "the architecture's ([defaults](#defaults-of-each-architecture))"
    if field.default is PydanticUndefined:
        return "**required**"
    value = field.default
    if isinstance(value, BaseModel):  # a section: where its default differs from the section's own
        own = type(value)().model_dump()
        changed = [f"`{k}` {json.dumps(v)}" for k, v in value.model_dump().items() if own[k] != v]
        return "see section" + (f"; here {', '.join(changed)}" if changed else "")
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def section(model: type[BaseModel]) -> str:
    doc = " ".join((model.__doc__ or "").split())
    rows = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        cells = [
            f"`{name}`",
            type_name(field.annotation),
            default_text(field, model, name),
            constraints(field.metadata),
            (field.description or "").replace("|", "\\|"),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return f"## {model.__name__}\n\n" + (f"{doc}\n\n" if doc else "") + "\n".join(rows) + "\n"


def reference() -> str:
    head = (
        "# Spec reference\n\n"
        "Generated from the pydantic models in `pipelines/spec.py` by `python -m pipelines.reference`; "
        "do not edit by hand. A spec is one YAML mapping ([UpdateSpec](#updatespec)); unknown keys, "
        "wrong types and out-of-range values are rejected before any work starts, with one line naming "
        "the field (`congruent run` exits 2). Fractions are fractions (0.02 = 2 %), not percentages.\n"
    )
    return "\n".join([head, *(section(model) for model in MODELS), architecture_defaults(), FINE_TUNING])


SWEEP = Path(__file__).resolve().parents[1] / "docs" / "results" / "baselines-results.json"  # benchmarks/quality


def architecture_defaults() -> str:
    """The recipes of pipelines/defaults.py, with the validation ER of every candidate the sweep
    tried (benchmarks/quality/baselines.py, docs/results/baselines-results.json) beside the one chosen."""
    results = json.loads(SWEEP.read_text()) if SWEEP.exists() else {"units": []}
    rows = [
        "| arch | optimizer | lr | weight decay | epochs | batch | augment | warm-up | then | clip | "
        "measured (val ER %, seed 0) |"
    ]
    rows.append("|---|---|---|---|---|---|---|---|---|---|---|")
    named = [
        *defaults.RECIPES.items(),
        ("hf:DIR", defaults.HF),
        ("hf:DIR with adapter", defaults.HF_ADAPTER),
        ("module:function", defaults.GENERIC),
    ]
    for arch, recipe in named:
        augment = "—" if arch.startswith(("text-", "hf:")) else ("yes" if recipe.augment else "no")  # images only
        tried = mean_over_sets(
            [u for u in results["units"] if u["part"] == "sweep" and (u["arch"] == arch or is_swept_hf(u, arch))]
        )
        text = arch.startswith(("text-", "hf:"))
        batches = {u["config"]["batch_size"] for u in tried}  # named where the candidates differ in it
        epochs = {u["config"].get("epochs") for u in tried}  # likewise
        figures = "; ".join(
            f"{'**' if is_recipe(recipe, u['config'], text) else ''}{u['config']['optimizer']} {u['config']['lr']:g}"
            f"{' wd ' + format(u['config']['weight_decay'], 'g') if text and u['config']['weight_decay'] else ''}"
            f"{' flat' if u['config'].get('augment') is False and not text else ''}"
            f"{' batch ' + str(u['config']['batch_size']) if len(batches) > 1 else ''}"
            f"{' ' + str(u['config']['epochs']) + ' epochs' if len(epochs) > 1 else ''}: "
            f"{100 * u['val_error_rate']:.2f}{'**' if is_recipe(recipe, u['config'], text) else ''}"
            f"{' (mean of ' + str(u['sets']) + ' sets)' if u['sets'] > 1 else ''}"
            for u in tried
        )
        rows.append(
            f"| `{arch}` | {recipe.optimizer} | {recipe.lr:g} | {recipe.weight_decay:g} | {recipe.epochs} | "
            f"{recipe.batch_size} | {augment} | {recipe.warmup_epochs:g} | {recipe.schedule}"
            f"{'; no decay on biases, norms' if recipe.weight_decay_on == 'weights' else ''} | "
            f"{recipe.max_grad_norm if recipe.max_grad_norm is not None else 'none'} | "
            f"{figures or NOT_SWEPT.get(arch, 'not measured')} |"
        )
    return (
        "## Defaults of each architecture\n\n"
        "What `train:` holds where a spec leaves a field out (`pipelines/defaults.py`); the spec's own values win, "
        "and the resolved values are the spec's from then on: its hash, the MLflow params of its run and of each "
        "training. Chosen by `python -m benchmarks.quality.baselines --part sweep` (each candidate trained once "
        "with the "
        "architecture's epochs on the built-in data, tweets or Fashion-MNIST, and hf: also on Reuters R8 and 20 "
        "Newsgroups, scored on the validation split; the lowest validation ER, mean over the sets, wins) and "
        "checked against the baseline a user would pick instead (docs/benchmarks/quality.md, "
        '"Baselines"). An ELODI student warms up at least 1 epoch whatever its architecture (`warmup_epochs: '
        "auto`, docs/methods.md).\n\n" + "\n".join(rows) + "\n"
    )


def is_swept_hf(unit: dict[str, Any], arch: str) -> bool:
    """The sweep's hf: units (the installed MiniLM) are the `hf:DIR` row's."""
    return arch == "hf:DIR" and str(unit["arch"]).startswith("hf:")


def mean_over_sets(units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per candidate (its resolved config): the mean validation ER over the sets it was
    trained on, and how many (`sets`), in the order first trained."""
    by_config: dict[str, list[dict[str, Any]]] = {}
    for unit in units:
        by_config.setdefault(json.dumps(unit["config"], sort_keys=True), []).append(unit)
    return [
        {
            "config": group[0]["config"],
            "val_error_rate": sum(u["val_error_rate"] for u in group) / len(group),
            "sets": len(group),
        }
        for group in by_config.values()
    ]


NOT_SWEPT = {
    "resnet32": "not swept: resnet20's recipe (one family; He et al. 2016 train both alike)",
    "resnet34": "not swept: resnet18's recipe (one family; a training takes over 20 min on 1,000 images on one core)",
    "resnet50": "not swept: resnet18's recipe (one family; longer still than resnet34)",
    "hf:DIR": "swept on the installed all-MiniLM-L6-v2 over the three text sets (BERT's schedule, Devlin et al. 2019, "
    "appendix A.3; rates 2e-5 to 2e-4, 3 and 6 epochs)",
    "hf:DIR with adapter": "hf:DIR's recipe at lr 2e-3: two rates tried on the tweets with MiniLM, 3 seeds (the LoRA "
    "paper's 5e-4 left one class never predicted; benchmarks/quality/adapter_flips.py)",
    "module:function": "not measured: your own architecture; the CIFAR ResNets' recipe (He et al. 2016)",
}


def is_recipe(recipe: defaults.Recipe, config: dict[str, Any], text: bool = False) -> bool:
    """Whether a sweep's candidate is the recipe (a unit recorded without `augment` was augmented;
    text is never augmented, whatever the recipe says)."""
    c = config
    ours = (recipe.optimizer, recipe.lr, recipe.weight_decay, recipe.batch_size, recipe.epochs)
    theirs = (c["optimizer"], c["lr"], c["weight_decay"], c["batch_size"], c.get("epochs", recipe.epochs))
    return ours == theirs and (text or recipe.augment == c.get("augment", True))


if __name__ == "__main__":
    print(reference(), end="")
