"""The names a spec is validated against — architectures, objectives, methods — with no torch import,
so that `pipelines.spec` (and `congruent --help`) stay light. workers/models/architectures.py and
workers/training/objectives.py build what these names stand for; tests/test_models.py checks they agree."""

IMAGE_ARCHITECTURES = (
    "mlp-small",
    "mlp",
    "small-cnn",
    "lenet",
    "resnet8",
    "resnet20",
    "resnet32",
    "resnet18",
    "resnet34",
    "resnet50",
)
TEXT_ARCHITECTURES = ("text-linear", "text-bag", "text-cnn", "text-transformer")
# the old model when it is a model outside Congruent: its answers on the update's texts, looked up by text
# (workers/models/answer_table.py); frozen, never trained, so no spec's `arch`
ANSWER_TABLE = "answer-table"
ARCHITECTURES = IMAGE_ARCHITECTURES + TEXT_ARCHITECTURES
OBJECTIVES = ("none", "kd", "fd-kl", "fd-lm", "dynamic-fd", "elodi", "proximal")  # what a model is trained to minimise
# an update's treatments
METHODS = ("none", "kd", "fd-kl", "fd-lm", "dynamic-fd", "ensemble", "elodi", "bcwi", "proximal", "auto")
NEEDS_OLD = ("kd", "fd-kl", "fd-lm", "dynamic-fd", "bcwi", "proximal", "auto")  # methods that read the old model
# methods whose student starts from the old model's weights (the plan's `init_from`): same arch and adapter
STARTS_FROM_OLD = ("bcwi", "proximal")
# λ of proximal's pull toward the old weights (pipelines/sections.py MethodSpec.proximal_weight says why)
PROXIMAL_WEIGHT = 0.001
# what `method: auto` may train, cheapest first (pipelines/auto.py): no treatment is always one of them
# auto's default candidates in the order it tests them, least aggressive first (the testing stops at the
# first that fails): the two that start from the old weights and stay near them (proximal held by λ, bcwi's
# α held to the ER limit), then the distillations (on small models KD cost 0 to +1.6 pt of ER, FD-LM +1.1 to
# +4.3), then the ELODI pair (m + 1 trainings)
AUTO_CANDIDATES = ("none", "proximal", "bcwi", "kd", "fd-lm", "elodi-legacy", "elodi")
# auto's ladder rungs: a candidate named NAME_VALUE (kd_0.1, proximal_0.0003) is NAME with this field of its
# method section set to VALUE, so one update can test a weight ladder, least aggressive first
LADDER_FIELDS = {"kd": "alpha", "fd-lm": "alpha", "proximal": "proximal_weight"}


def ladder_rung(name: str) -> tuple[str, float | None]:
    """A candidate's method and its rung's value: "kd_0.1" → ("kd", 0.1) (LADDER_FIELDS), "kd" →
    ("kd", None); ValueError for a rung of a method without one or a value that is not a number."""
    base, sep, value = name.partition("_")
    if not sep:
        return name, None
    if base not in LADDER_FIELDS:
        raise ValueError(f"auto candidate {name}: only {', '.join(LADDER_FIELDS)} take a rung (NAME_VALUE)")
    try:
        return base, float(value)
    except ValueError:
        raise ValueError(f"auto candidate {name}: its rung {value!r} is not a number") from None


# objectives that distil on `data.unlabelled` too (their distillation term needs no label; CE skips those rows;
# FD weighs such a row α, its old model's correctness unknown): dynamic FD's weight reads the label, so not it
UNLABELLED_OBJECTIVES = ("kd", "fd-kl", "fd-lm", "elodi")
# methods whose student has a distillation term (auto: its kd, fd-lm and elodi candidates)
DISTILLING_METHODS = ("kd", "fd-kl", "fd-lm", "dynamic-fd", "elodi", "auto")
REPLICA_METHODS = ("elodi", "ensemble")  # methods that train m replicas of the new architecture
# how a registry lock's name ends (orchestrator/tracking/locks.py): no model may be named so
LOCK_SUFFIX = r"\.[A-Za-z0-9_]+-lock$"


# What a `data.path` is, from its name alone (nothing is read): the spec's checks and the driver's
# stream plan ask these, so they agree.
TEXT_FORMATS = (".csv", ".tsv", ".jsonl", ".parquet")  # a path with one of these suffixes holds text tables
GLOB = "*?["  # a path with one of these characters is a glob of shards


def is_s3(path: str) -> bool:
    return path.startswith("s3://")


def is_glob(path: str) -> bool:
    return any(c in path for c in GLOB)


def is_table(path: str) -> bool:
    """A text table file, or a glob of them, by its suffix."""
    return path.lower().endswith(TEXT_FORMATS)


HF_PREFIX = "hf:"  # `hf:DIR`: a Hugging Face sequence classifier and its tokenizer from a local directory


def is_hf(arch: str) -> bool:
    return arch.startswith(HF_PREFIX)


def modality_of(arch: str) -> str | None:
    """What a built-in architecture reads, "image" or "text"; None for a user factory."""
    if arch in TEXT_ARCHITECTURES or arch == ANSWER_TABLE or is_hf(arch):
        return "text"
    return "image" if arch in IMAGE_ARCHITECTURES else None


WEIGHTS_FILE_SUFFIXES = (".pt", ".pth", ".safetensors")  # an `init` naming a state_dict file


def is_weights_file(init: str) -> bool:
    """`init` names a state_dict file (else `old` or a torchvision weights name)."""
    return init.lower().endswith(WEIGHTS_FILE_SUFFIXES)


def is_torchvision_weights(init: str) -> bool:
    """`init` names torchvision weights (IMAGENET1K_V1, DEFAULT): neither `old` nor a file."""
    return init != "old" and not is_weights_file(init)


def is_user_factory(arch: str) -> bool:
    """`package.module:function`: a model factory of the user's own (needs allow_user_factories)."""
    return ":" in arch and not is_hf(arch)


def check_architecture(arch: str, allow_user_factories: bool = False) -> None:
    """ValueError (one line) unless `arch` is a known name or, with the opt-in, `module:function`.
    Whether the user's factory imports is checked later, before any work (it runs user code)."""
    if arch in ARCHITECTURES:
        return
    if is_hf(arch):
        if not arch.removeprefix(HF_PREFIX).strip():
            raise ValueError("hf: needs the directory of a Hugging Face model, hf:DIR")
        return
    if not is_user_factory(arch):
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHITECTURES)}, hf:DIR")
    if not allow_user_factories:
        raise ValueError(f"user model factory {arch!r} needs allow_user_factories (it runs user code)")
    module, _, function = arch.partition(":")
    if not module or not function or not all(part.isidentifier() for part in (*module.split("."), function)):
        raise ValueError(f"user model factory {arch!r} must read package.module:function")
