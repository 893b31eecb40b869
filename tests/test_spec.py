"""The update-pipeline spec: valid specs parse; each bad one is one line naming the field, exit 2."""

import re

import pytest
import yaml

from orchestrator.cli import main
from orchestrator.planning.plan import objective_of
from pipelines.spec import SpecError, load_spec, parse_spec

BASE = {"model": "fmnist", "version": "v2", "arch": "mlp-small", "data": {"train_limit": 500, "eval_limit": 200}}


def with_(**changes):
    spec = {**BASE}
    for dotted, value in changes.items():
        node = spec
        *parents, leaf = dotted.split("__")
        for parent in parents:
            node[parent] = dict(node.get(parent, {}))
            node = node[parent]
        node[leaf] = value
    return spec


def test_the_issue_example_parses(tmp_path):
    text = """
model: fmnist-classifier
version: v2
data: {dataset: fashion-mnist, subset: all, train_limit: null, eval_limit: null}
arch: resnet8
method: {name: elodi, m: 8, alpha: 0.8, k: 10, topk_by: teacher, legacy_weight: null}
old: fmnist-classifier-v1.pt
train: {epochs: 10, batch_size: 128, lr: 0.1, seed: 0, augment: true}
resources: {replica: {cpus: 1, gpus: 0}, teacher_actors: 2}
"""
    (tmp_path / "s.yaml").write_text(text)
    spec = load_spec(tmp_path / "s.yaml")
    assert spec.method.m == 8 and objective_of(spec.method).weight == 0.8 and spec.resources.teacher_actors == 2
    assert spec.spec_hash == parse_spec(yaml.safe_load(text)).spec_hash
    assert spec.spec_hash != parse_spec({**yaml.safe_load(text), "version": "v3"}).spec_hash


@pytest.mark.parametrize(
    "document,problem",
    [
        (with_(colour="red"), "colour: unknown key"),
        (with_(method__name="elodi", method__mm=3), "method.mm: unknown key"),
        (with_(method__m=0), "method.m: Input should be greater than or equal to 1"),
        (with_(method__alpha=1.5), "method.alpha: Input should be less than or equal to 1"),
        (with_(method__alpha=-0.1), "method.alpha"),
        (with_(method__k=0), "method.k"),
        (with_(method__name="magic"), "method.name"),
        (with_(method__topk_by="both"), "method.topk_by"),
        (with_(train__epochs="ten"), "train.epochs: Input should be a valid integer"),
        (with_(train__lr=0), "train.lr"),
        (with_(arch="resnet9000"), "arch: unknown architecture 'resnet9000'"),
        (with_(arch="evil.module:build"), "needs allow_user_factories"),
        (with_(method__name="fd-lm"), "old: method 'fd-lm' needs an old model"),
        (with_(method__name="bcwi"), "old: method 'bcwi' needs an old model"),
        (with_(method__name="elodi", method__legacy_weight=0.5), "old: legacy_weight needs an old model"),
        (
            with_(method__name="kd", method__legacy_weight=0.5, old="x.pt"),
            "only elodi (and auto's elodi-legacy) has a legacy term",
        ),
        (with_(data__subset="most"), "data.subset"),
        (with_(data__dataset="fashion-mnist", data__path="/tmp"), "either dataset or path"),
        (with_(resources__teacher_actors=-1), "resources.teacher_actors"),
        (with_(resources__replica={"pack": 0}), "resources.replica.pack"),
        (with_(version="v 2"), "version: String should match pattern"),
        ({k: v for k, v in BASE.items() if k != "arch"}, "arch: Field required"),
        (["a", "list"], "YAML mapping"),
        (with_(method__name="elodi", old="o.pt", tune={"space": {}}), "space: give at least one"),
        (with_(method__name="elodi", old="o.pt", tune={"space": {"beta": [1]}}), "tune.space.beta"),
        (
            with_(method__name="elodi", old="o.pt", tune={"space": {"alpha": {"low": 0.1, "high": 0.9}}}),
            "grid search takes a list",
        ),
        (with_(method__name="elodi", old="o.pt", tune={"space": {"k": [0, 3]}}), "integers ≥ 1"),
        (with_(method__name="elodi", old="o.pt", tune={"space": {"alpha": [0.5, 1.5]}}), "values must lie in [0, 1]"),
        (with_(method__name="elodi", tune={"space": {"alpha": [0.5]}}), "old: tune measures"),
        (with_(method__name="fd-lm", old="o.pt", tune={"space": {"alpha": [0.5]}}), "method.name must be elodi"),
        (
            with_(
                method__name="elodi",
                old="o.pt",
                tune={"search": "random", "space": {"lr": {"low": 0, "high": 1, "log": True}}},
            ),
            "log range needs low > 0",
        ),
        (with_(model="fmnist.registration-lock"), "has the form of a registry lock's name"),
    ],
)
def test_bad_specs_name_the_field(document, problem):
    with pytest.raises(SpecError, match=re.escape(problem)):
        parse_spec(document)


def test_tune_space_maps_to_ray_tune_search_spaces():
    from ray import tune

    from orchestrator.driver.tune import search_space, trial_spec

    spec = parse_spec(
        with_(
            method__name="elodi",
            old="o.pt",
            tune={
                "search": "random",
                "num_samples": 5,
                "space": {"alpha": [0.5, 0.8], "lr": {"low": 0.01, "high": 0.1, "log": True}, "k": [3, 10]},
            },
        )
    )
    space = search_space(spec.tune)
    assert isinstance(space["alpha"], tune.search.sample.Categorical)
    assert isinstance(space["lr"], tune.search.sample.Float) and space["lr"].lower == 0.01
    assert space["k"].categories == [3, 10] and all(isinstance(v, int) for v in space["k"].categories)
    grid = search_space(parse_spec(with_(method__name="elodi", old="o.pt", tune={"space": {"alpha": [0.5, 0.8]}})).tune)
    assert grid["alpha"] == {"grid_search": [0.5, 0.8]}
    trial = trial_spec(spec, {"alpha": 0.8, "k": 3, "lr": 0.02})
    assert (trial.method.alpha, trial.method.k, trial.train.lr) == (0.8, 3, 0.02)


def _run(tmp_path, capsys, document=None, text=None):
    path = tmp_path / "spec.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(document))
    code = main(["run", str(path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    "document,text,problem",
    [
        (None, "model: [unclosed", "invalid YAML at line 1"),
        (with_(method__alpha=2), None, "method.alpha"),
        (with_(data__path="/nonexistent/dir", data__dataset=None), None, "data: /nonexistent/dir: no such file"),
        (with_(method__name="fd-lm", old="/nonexistent/old.pt"), None, "old: /nonexistent/old.pt: no such checkpoint"),
    ],
)
def test_congruent_run_rejects_bad_specs_before_any_work(tmp_path, capsys, document, text, problem):
    code, err = _run(tmp_path, capsys, document, text)
    assert code == 2 and len(err.splitlines()) == 1 and problem in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_congruent_run_rejects_class_and_architecture_mismatches(tmp_path, capsys):
    from workers.models.checkpoints import ModelSettings, save_checkpoint

    five = ModelSettings("mlp-small", 5)
    save_checkpoint(tmp_path / "five.pt", five.build(), five)
    code, err = _run(tmp_path, capsys, with_(method__name="fd-lm", old=str(tmp_path / "five.pt")))
    assert code == 2 and "has 5 classes, the data has 10" in err
    ten = ModelSettings("small-cnn", 10)
    save_checkpoint(tmp_path / "cnn.pt", ten.build(), ten)
    code, err = _run(tmp_path, capsys, with_(method__name="bcwi", old=str(tmp_path / "cnn.pt")))
    assert code == 2 and "arch must equal the old model's ('small-cnn')" in err
    (tmp_path / "broken.pt").write_bytes(b"not a checkpoint")
    code, err = _run(tmp_path, capsys, with_(method__name="kd", old=str(tmp_path / "broken.pt")))
    assert code == 2 and "not a readable checkpoint" in err and len(err.splitlines()) == 1


def test_an_hf_directory_is_the_starting_weights_a_frozen_backbone_needs():
    """`hf:DIR` starts from the directory's weights, so `freeze: backbone` needs no `init`; any other
    architecture does."""
    document = {**BASE, "arch": "hf:some/dir", "data": {"dataset": "tweet-sentiment"}, "train": {"freeze": "backbone"}}
    assert parse_spec(document).train.freeze == "backbone"
    with pytest.raises(SpecError, match="freezing the backbone needs starting weights"):
        parse_spec(with_(train__freeze="backbone"))


def test_every_cross_field_problem_is_a_line_of_its_own():
    """The checks across fields go on after the first problem: each is one of the error's lines."""
    with pytest.raises(SpecError) as caught:
        parse_spec(with_(method__name="kd", method__legacy_weight=0.5, tokenizer={"vocab_size": 500}))
    assert caught.value.problems == [
        "old: method 'kd' needs an old model (a registry reference NAME@ALIAS or a checkpoint path)",
        "method.legacy_weight: only elodi (and auto's elodi-legacy) has a legacy term",
        "tokenizer: only text data has a tokenizer; the data is images",
    ]


def test_a_spec_without_a_method_trains_one_plain_model():
    assert parse_spec(BASE).method.name == "none"


def test_an_hf_model_takes_only_max_length_from_the_tokenizer_section():
    document = {**BASE, "arch": "hf:some/dir", "data": {"dataset": "tweet-sentiment"}}
    assert parse_spec({**document, "tokenizer": {"max_length": 64}}).tokenizer.max_length == 64
    with pytest.raises(SpecError) as caught:
        parse_spec({**document, "tokenizer": {"kind": "bpe", "vocab_size": 500}})
    assert caught.value.problems == [
        "tokenizer.kind: an hf:DIR model reads its directory's own tokenizer; only max_length applies",
        "tokenizer.vocab_size: an hf:DIR model reads its directory's own tokenizer; only max_length applies",
    ]


def test_train_fields_left_out_come_from_the_architectures_recipe():
    """A spec with `arch` and `data` trains with its architecture's recipe (pipelines/defaults.py);
    a value the spec gives wins; the resolved values are the spec's own (its hash sees them)."""
    from pipelines.defaults import HF, RECIPES

    bag = parse_spec({**BASE, "arch": "text-bag", "data": {"dataset": "tweet-sentiment"}})
    recipe = RECIPES["text-bag"]
    assert (bag.train.optimizer, bag.train.lr, bag.train.weight_decay, bag.train.epochs, bag.train.batch_size) == (
        recipe.optimizer,
        recipe.lr,
        recipe.weight_decay,
        recipe.epochs,
        recipe.batch_size,
    )
    given = parse_spec({**BASE, "arch": "text-bag", "data": {"dataset": "tweet-sentiment"}, "train": {"lr": 0.5}})
    assert given.train.lr == 0.5 and given.train.optimizer == recipe.optimizer
    assert given.spec_hash != bag.spec_hash
    hf = parse_spec({**BASE, "arch": "hf:dir", "data": {"dataset": "tweet-sentiment"}})
    assert (hf.train.optimizer, hf.train.lr) == (HF.optimizer, HF.lr)


def test_the_plan_warms_up_as_the_architecture_says_and_an_elodi_student_at_least_an_epoch():
    from orchestrator.planning.plan import warmup_epochs
    from pipelines.defaults import RECIPES

    transformer = {**BASE, "arch": "text-transformer", "data": {"dataset": "tweet-sentiment"}}
    plain = parse_spec(transformer)
    assert warmup_epochs(plain, student=True) == RECIPES["text-transformer"].warmup_epochs > 0
    elodi = parse_spec({**transformer, "method": {"name": "elodi", "m": 2}, "train": {"epochs": 20}})
    assert warmup_epochs(elodi, student=True) == 1.0 and warmup_epochs(elodi, student=False) == min(
        RECIPES["text-transformer"].warmup_epochs, 20
    )


@pytest.mark.parametrize(
    "document",
    [
        BASE,
        {**BASE, "arch": "text-cnn", "data": {"dataset": "tweet-sentiment"}, "tokenizer": {"vocab_size": 500}},
        {**BASE, "arch": "hf:some/dir", "data": {"dataset": "tweet-sentiment"}, "tokenizer": {"max_length": 64}},
    ],
    ids=["images", "text", "hf"],
)
def test_a_spec_written_back_with_every_field_reads_the_same(document):
    """Each run logs its spec with every field (spec.yaml); `congruent report` reads it back."""
    spec = parse_spec(document)
    assert parse_spec(yaml.safe_load(yaml.safe_dump(spec.model_dump(mode="json")))) == spec
