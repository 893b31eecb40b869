"""The update-pipeline spec: one YAML file per model version, validated before any work starts.

    model: fmnist-classifier        # registered model name
    version: v2                     # free label
    data: {dataset: fashion-mnist, subset: all, train_limit: null, eval_limit: null}
    arch: resnet8
    method: {name: elodi, m: 8, alpha: 0.8, k: 10, topk_by: teacher, legacy_weight: null}  # left out: none
    old: fmnist-classifier@champion # the deployed version: NAME@ALIAS, NAME/VERSION or a checkpoint path
    train: {seed: 0}                # the rest: the architecture's defaults (pipelines/defaults.py)
    resources: {replica: {cpus: 1, gpus: 0}, teacher_actors: 2}

Unknown keys, wrong types and out-of-range values are rejected by pydantic; `load_spec` turns the
problems into one line naming each field (and the known key an unknown one is close to). This
module imports no torch (names come from workers/names.py): validating a spec is instant.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from pipelines.auto import AUTO_ONLY_FIELDS, auto_choice
from pipelines.data_section import DataSpec
from pipelines.defaults import recipe_for
from pipelines.operations import (
    PromoteSpec,
    RangeSpec,
    ReplicaResources,
    ResourcesSpec,
    StudentResources,
    TuneSpec,
    WorkerResources,
)
from pipelines.sections import (
    AdapterSpec,
    DistillInputsSpec,
    MethodSpec,
    TokenizerSpec,
    TrainSpec,
    _Strict,
)
from workers.errors import Problems, first_line
from workers.names import (
    DISTILLING_METHODS,
    HF_PREFIX,
    IMAGE_ARCHITECTURES,
    LOCK_SUFFIX,
    NEEDS_OLD,
    PROXIMAL_WEIGHT,
    REPLICA_METHODS,
    TEXT_ARCHITECTURES,
    UNLABELLED_OBJECTIVES,
    WEIGHTS_FILE_SUFFIXES,
    check_architecture,
    is_hf,
    is_torchvision_weights,
    is_weights_file,
    modality_of,
)

__all__ = [  # the sections live in pipelines/sections.py, data_section.py, operations.py; import them from here
    "AdapterSpec",
    "DistillInputsSpec",
    "DataSpec",
    "MethodSpec",
    "PromoteSpec",
    "RangeSpec",
    "ReplicaResources",
    "ResourcesSpec",
    "SpecError",
    "StudentResources",
    "TokenizerSpec",
    "TrainSpec",
    "TuneSpec",
    "UpdateSpec",
    "WorkerResources",
    "load_spec",
    "parse_spec",
]


class SpecError(Problems):
    """A spec that cannot run: one line per problem (`problems`), each naming the field."""


class UpdateSpec(_Strict):
    """One update pipeline: the new version of a registered model and how to train it."""

    model: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=128,
        description="registered model name (MLflow registry and experiment); a name ending in "
        "`.<word>-lock` is reserved for the registry's locks",
    )
    version: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=64,
        description="a free label (MLflow numbers the registered versions)",
    )
    data: DataSpec = Field(DataSpec(), description="the dataset and its splits")
    arch: str = Field(
        description="mlp-small, mlp, small-cnn, lenet, resnet8/20/32, resnet18/34/50 (images); text-linear, text-bag, "
        "text-cnn, text-transformer (text); hf:DIR: a Hugging Face sequence classifier and its tokenizer from a "
        "local directory (no hub access), fine-tuned from its weights; or `module:function` with "
        "allow_user_factories"
    )
    init: str | None = Field(
        None,
        min_length=1,
        description="where the model starts (replicas, student and plain training alike): a torchvision "
        "weights name of resnet18/34/50 (IMAGENET1K_V1, DEFAULT; read from torchvision's cache, never "
        "downloaded), a state_dict file (.pt, .pth, .safetensors; the classifier head stays fresh when the "
        "class count differs), or old: the deployed version's own weights (fine-tuning; same arch); null: "
        "random weights from the seed",
    )
    method: MethodSpec = Field(MethodSpec(), description="the treatment")
    old: str | None = Field(
        None,
        description="the deployed version: a checkpoint path, a registry reference NAME@ALIAS / NAME/VERSION, or "
        "any MLflow classifier (a registered version Congruent did not train, runs:/…, a model folder) whose pyfunc "
        "answers class probabilities on held text: its answers on every split are computed once and cached "
        "(docs/guide/foreign-old.md). "
        "A registered version may have been trained and evaluated on other data (data that grew): its eval samples "
        "and this spec's must share at least 50 % of the smaller set (matched by sample id), else preflight refuses "
        "it in one line; the update's NFR re-runs the old model on this spec's eval split",
    )
    train: TrainSpec = Field(TrainSpec(), description="optimiser and loop")
    tokenizer: TokenizerSpec = Field(TokenizerSpec(), description="text data: the version's tokenizer")
    resources: ResourcesSpec = Field(ResourcesSpec(), description="Ray resources per stage")
    storage: str = Field("runs", description="checkpoints: a local directory or s3://bucket/prefix")
    promote: PromoteSpec | None = Field(None, description="gate that moves alias `champion` to this version")
    tune: TuneSpec | None = Field(None, description="the search of `congruent tune`")
    allow_user_factories: bool = Field(False, description="let `arch` name your own `module:function`")

    @model_validator(mode="before")
    @classmethod
    def _architecture_defaults(cls, document: Any) -> Any:
        """The `train` fields the spec leaves out, from its architecture's recipe (pipelines/defaults.py)."""
        if not isinstance(document, dict) or not isinstance(document.get("arch"), str):
            return document
        train = document.get("train")
        if train is None:
            train = {}
        if not isinstance(train, dict):
            return document  # not a mapping: the field's own validation says so
        recipe = recipe_for(document["arch"], adapter=train.get("adapter") is not None)
        return {**document, "train": {**recipe.train_fields(), **train}}

    @model_validator(mode="after")
    def _consistent(self) -> UpdateSpec:
        """Checks across fields, every one of them: all problems found, one line each."""
        problems = self._cross_field_problems()
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _cross_field_problems(self) -> list[str]:
        problems = []
        if re.search(LOCK_SUFFIX, self.model):
            problems.append(
                f"model: {self.model!r} has the form of a registry lock's name (….<word>-lock); choose another"
            )
        try:
            check_architecture(self.arch, self.allow_user_factories)
        except ValueError as e:
            problems.append(f"arch: {e}")
        reads = modality_of(self.arch)
        if reads is not None and reads != self.data.kind:
            kinds = ", ".join(TEXT_ARCHITECTURES if self.data.kind == "text" else IMAGE_ARCHITECTURES)
            problems.append(f"arch: {self.arch} reads {reads}, the data is {self.data.kind} ({kinds})")
        if self.old is None and (self.method.name in NEEDS_OLD or self.method.legacy_weight is not None):
            needs = "legacy_weight" if self.method.name not in NEEDS_OLD else f"method {self.method.name!r}"
            problems.append(f"old: {needs} needs an old model (a registry reference NAME@ALIAS or a checkpoint path)")
        if self.data.unlabelled is not None and self.method.name not in (*UNLABELLED_OBJECTIVES, "auto"):
            name = self.method.name
            problems.append(
                f"data.unlabelled: only a distilling student (kd, fd-kl, fd-lm, elodi, auto's) reads unlabelled "
                f"texts; method is {name}"
            )
        if self.train.distill_inputs is not None:
            if self.data.kind != "text":
                problems.append(
                    f"train.distill_inputs: {self.train.distill_inputs.perturb} perturbs text; the data is images "
                    "(their crop and flip, train.augment, already perturb what a student distils on)"
                )
            if self.method.name not in DISTILLING_METHODS:
                problems.append(
                    f"train.distill_inputs: perturbs the distillation term, and method {self.method.name} has none "
                    f"({', '.join(DISTILLING_METHODS)} have)"
                )
        if self.method.legacy_weight is not None and self.method.name not in ("elodi", "auto"):
            problems.append("method.legacy_weight: only elodi (and auto's elodi-legacy) has a legacy term")
        if self.method.proximal_weight != PROXIMAL_WEIGHT and self.method.name not in ("proximal", "auto"):
            problems.append("method.proximal_weight: only proximal (and auto's proximal) pulls toward the old weights")
        problems += self._auto_problems()
        problems += self._init_problems()
        if self.train.adapter is not None and not is_hf(self.arch):
            problems.append(f"train.adapter: LoRA adapters are for hf:DIR models; arch is {self.arch}")
        if self.train.adapter is not None and self.train.freeze != "none":
            problems.append("train.freeze: an adapter already keeps the pretrained weights frozen; leave freeze none")
        if is_hf(self.arch) and self.resources.replica.pack > 1 and self.method.name in REPLICA_METHODS:
            problems.append("resources.replica.pack: hf:DIR models train one per task; set pack 1")
        # (compared with the section's defaults, not with what the document named: a spec written back
        # with every field, as each run logs it, reads the same)
        if self.data.kind == "image" and self.tokenizer != TokenizerSpec():
            problems.append("tokenizer: only text data has a tokenizer; the data is images")
        if is_hf(self.arch):
            problems += [
                f"tokenizer.{name}: an hf:DIR model reads its directory's own tokenizer; only max_length applies"
                for name in ("kind", "vocab_size")
                if getattr(self.tokenizer, name) != TokenizerSpec.model_fields[name].default
            ]
        if self.tune is not None:
            if self.method.name != "elodi":
                problems.append("tune: searches ELODI's settings, so method.name must be elodi")
            if self.old is None:
                problems.append("old: tune measures each trial's NFR against the old model; give one")
            if "legacy_weight" in self.tune.space and self.method.legacy_weight is None:
                problems.append("tune.space.legacy_weight: set method.legacy_weight to enable the legacy term")
            if self.resources.student.workers > 1:
                problems.append("resources.student.workers: each Tune trial trains in one task; set 1")
        return problems

    def _auto_problems(self) -> list[str]:
        """The auto-only fields with another method, and an auto budget that leaves no treatment to try."""
        method = self.method
        defaults = {name: MethodSpec.model_fields[name].default for name in AUTO_ONLY_FIELDS}
        if method.name != "auto":
            return [
                f"method.{name}: only method auto has {name}"
                for name, default in defaults.items()
                if getattr(method, name) != default
            ]
        choice = auto_choice(method)
        if len(choice.candidates) == 1:
            costs = {name: method.m + 1 if name.startswith("elodi") else 1 for name in method.candidates}
            cheapest = min(costs, key=costs.__getitem__)
            return [
                f"method.budget: {method.budget} trainings leave auto no candidate beside no treatment "
                f"(it takes 1, the cheapest candidate, {cheapest}, {costs[cheapest]} more)"
            ]
        return []

    def _init_problems(self) -> list[str]:
        init, problems = self.init, []
        if init is None:
            if self.train.freeze != "none" and not is_hf(self.arch):  # hf:DIR starts from its directory's weights
                problems.append("train.freeze: freezing the backbone needs starting weights (init, or arch hf:DIR)")
            return problems
        if init == "old":
            if self.old is None:
                problems.append("init: old starts from the deployed version's weights; give `old`")
        elif is_torchvision_weights(init):
            if not init.replace("_", "").isalnum() or init.upper() != init:
                problems.append(
                    f"init: {init!r} is neither old, a state_dict file ({', '.join(WEIGHTS_FILE_SUFFIXES)}) nor a "
                    "torchvision weights name (e.g. IMAGENET1K_V1)"
                )
            elif self.arch not in ("resnet18", "resnet34", "resnet50"):
                problems.append(f"init: torchvision weights {init} exist for resnet18/34/50, not {self.arch}")
        if self.train.freeze != "none" and self.resources.replica.pack > 1 and self.method.name in REPLICA_METHODS:
            problems.append("train.freeze: packed replicas (resources.replica.pack > 1) train every weight; set pack 1")
        return problems

    def with_absolute_paths(self, base: Path | None = None) -> UpdateSpec:
        """Local paths (data.path, old, storage, an init file, hf:DIR) made absolute, so workers on other nodes and in
        other directories read and write the same places."""
        base = base or Path.cwd()

        def absolute(value: str | None) -> str | None:
            if value is None or value.startswith("s3://"):
                return value
            return str((base / value).resolve())

        paths = {
            "path": absolute(self.data.path),
            "unlabelled": absolute(self.data.unlabelled),
            "slices": absolute(self.data.slices),
        }
        data = self.data.model_copy(update=paths)
        init = absolute(self.init) if self.init is not None and is_weights_file(self.init) else self.init
        arch = HF_PREFIX + str(absolute(self.arch.removeprefix(HF_PREFIX))) if is_hf(self.arch) else self.arch
        return self.model_copy(
            update={
                "data": data,
                "old": absolute(self.old),
                "storage": absolute(self.storage),
                "init": init,
                "arch": arch,
            }
        )

    @property
    def spec_hash(self) -> str:
        """sha256 of the canonical JSON of the spec; 12 hex digits."""
        document = self.model_dump(mode="json")
        if self.method.name != "auto":  # the auto-only fields (their defaults): hashes of earlier releases hold
            document["method"] = {k: v for k, v in document["method"].items() if k not in AUTO_ONLY_FIELDS}
        if self.method.name not in ("proximal", "auto"):  # so does proximal's λ (its default) for the others
            del document["method"]["proximal_weight"]
        canonical = json.dumps(document, sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


_SHAPE_ERRORS = ("list_type", "model_type", "dict_type", "model_attributes_type", "float_type")


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The pydantic model a field holds (also inside `X | None`), else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _did_you_mean(loc: tuple) -> str:
    """ " (did you mean epochs?)" for an unknown key close to a field of the model it was found in."""
    model: type[BaseModel] | None = UpdateSpec
    for part in loc[:-1]:
        if model is None or not isinstance(part, str) or part not in model.model_fields:
            return ""
        model = _model_in(model.model_fields[part].annotation)
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1) if model else []
    return f" (did you mean {close[0]}?)" if close else ""


def _describe(error: ValidationError) -> list[str]:
    """One line per problem, `field: problem`. A union's member errors about the wrong shape give
    way to the one that says what is wrong inside; member tags (`list[float]`, `RangeSpec`) are
    dropped from the field path; an unknown key close to a known one gets a "did you mean"; the
    cross-field checks give a line each."""
    problems: dict[str, list[tuple[str, str]]] = {}
    for e in error.errors():
        parts = [str(p) for p in e["loc"] if not (isinstance(p, str) and ("[" in p or p[:1].isupper()))]
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown key" + _did_you_mean(e["loc"])
        problems.setdefault(".".join(parts), []).append((e["type"], message))
    lines = []
    for location, found in problems.items():
        specific = [message for kind, message in found if kind not in _SHAPE_ERRORS] or [m for _, m in found]
        for message in dict.fromkeys(specific) if not location else [" or ".join(dict.fromkeys(specific))]:
            lines += [f"{location}: {line}" if location else line for line in message.splitlines()]
    return lines


def parse_spec(document: object) -> UpdateSpec:
    """Validate a parsed YAML document; SpecError with one line on any problem."""
    if not isinstance(document, dict):
        raise SpecError("the spec must be a YAML mapping of fields")
    try:
        return UpdateSpec.model_validate(document)
    except ValidationError as e:
        raise SpecError(*_describe(e)) from None


def _yaml_problem(error: yaml.YAMLError, text: str) -> str:
    """`invalid YAML at line 4: expected ',' or '}', but got ':' (while parsing a flow mapping at
    line 3: `data: {train_limit: 3`)`: where the parser stopped, why, and where the construct it
    was reading began."""
    mark, problem = getattr(error, "problem_mark", None), getattr(error, "problem", None)
    line = f"invalid YAML at line {mark.line + 1}" if mark else "invalid YAML"
    if not problem:
        return f"{line} ({first_line(error)})"
    context, context_mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    where = ""
    if context and context_mark is not None:
        source = text.splitlines()[context_mark.line].strip() if context_mark.line < len(text.splitlines()) else ""
        where = f" ({context} at line {context_mark.line + 1}" + (f": `{source}`)" if source else ")")
    elif context:
        where = f" ({context})"
    return f"{line}: {problem}{where}"


def load_spec(path: str | Path) -> UpdateSpec:
    """Read and validate a YAML spec file."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read ({e.strerror if isinstance(e, OSError) else e})") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: {_yaml_problem(e, text)}") from None
    try:
        return parse_spec(document)
    except SpecError as e:
        raise SpecError(*(f"{path}: {problem}" for problem in e.problems)) from None
