"""`data.unlabelled`: texts without labels that an ELODI student also distils on — read, deduplicated
against every labelled split, appended to the student's (and its teacher pool's) training split with
the label −1, skipped by CE and taken by LDI; the replicas train on the labelled split only."""

import json
import math

import pytest
import torch

from conftest import SPEC_RESOURCES
from pipelines.spec import parse_spec
from workers.data.text import UNLABELLED, TextSet
from workers.errors import DataError

TWEETS = {"dataset": "tweet-sentiment", "train_limit": 600, "eval_limit": 400}


def test_cross_entropy_skips_unlabelled_samples():
    """CE over the labelled rows only: −log softmax(s)[ℓ] averaged over them; 0 when none is labelled."""
    from workers.training.losses import cross_entropy

    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0], [5.0, -5.0]])
    labels = torch.tensor([0, UNLABELLED, 1])
    expected = (math.log(2.0) + (10.0 + math.log1p(math.exp(-10.0)))) / 2  # rows 0 and 2
    assert cross_entropy(logits, labels).item() == pytest.approx(expected, rel=1e-6)
    assert cross_entropy(logits, torch.full((3,), UNLABELLED)).item() == 0.0
    assert cross_entropy(logits, torch.tensor([0, 0, 1])).item() == pytest.approx(
        torch.nn.functional.cross_entropy(logits, torch.tensor([0, 0, 1])).item()
    )


def test_ldi_leaves_out_the_true_class_of_labelled_samples_only():
    """exclude_label zeroes the true class's term; an unlabelled sample (−1) keeps all of them."""
    from workers.training.losses import logit_difference_inhibition

    student, teacher = torch.zeros(2, 3), torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    terms = logit_difference_inhibition(student, teacher, k=3, labels=torch.tensor([2, UNLABELLED]))
    assert terms.item() == pytest.approx(((1 + 4) + (1 + 4 + 9)) / 2)  # sample 0 without class 2's 9


def test_elodi_objective_on_unlabelled_rows_is_ldi_only():
    from workers.training.objectives import Objective

    student, teacher = torch.zeros(2, 3), torch.tensor([[1.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    unlabelled = torch.full((2,), UNLABELLED)
    loss = Objective("elodi", alpha=0.5, k=1)(student, unlabelled, {"teacher": teacher})
    assert loss.item() == pytest.approx(0.5 * (1 + 9) / 2)


def test_read_texts_takes_the_text_column_and_names_a_bad_row(tmp_path):
    from workers.data.text_tables import read_texts

    (tmp_path / "u.csv").write_text('id,text\n1,good morning\n2,"two\nlines"\n')
    assert read_texts(tmp_path / "u.csv") == ("good morning", "two\nlines")
    (tmp_path / "u.jsonl").write_text('{"body": "a"}\n{"body": "b"}\n')
    assert read_texts(tmp_path / "u.jsonl", "body") == ("a", "b")
    with pytest.raises(DataError, match=r"u.jsonl: line 1: no key 'text'; the keys are 'body'$"):
        read_texts(tmp_path / "u.jsonl")
    (tmp_path / "blank.csv").write_text("text\nfine\n   \n")
    with pytest.raises(DataError, match=r"blank.csv: line 3: empty text in column 'text'"):
        read_texts(tmp_path / "blank.csv")
    (tmp_path / "numbers.jsonl").write_text('{"text": "a"}\n{"text": 3}\n')
    with pytest.raises(DataError, match=r"numbers.jsonl: line 2: .*3"):
        read_texts(tmp_path / "numbers.jsonl")
    with pytest.raises(DataError, match="no such file"):
        read_texts(tmp_path / "missing.csv")


def test_unlabelled_texts_leave_out_labelled_and_held_out_texts_and_copies():
    from workers.data.unlabelled import unlabelled_texts

    train = TextSet(("a", "b"), torch.tensor([0, 1]))
    held_out = TextSet(("c",), torch.tensor([1]))
    kept = unlabelled_texts(["x", " a ", "c", "y", "x", "z"], [train, held_out], ("neg", "pos"))
    assert kept.texts.texts == ("x", "y", "z") and kept.dropped == 3
    assert kept.texts.labels.tolist() == [UNLABELLED] * 3 and kept.texts.classes == ("neg", "pos")
    joined = train.followed_by(kept.texts)
    assert joined.texts == ("a", "b", "x", "y", "z") and joined.labels.tolist() == [0, 1, -1, -1, -1]


def _unlabelled_file(tmp_path, rows):
    import csv

    path = tmp_path / "unlabelled.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text"])
        writer.writerows([text] for text in rows)
    return path


def test_the_student_trains_on_the_labelled_split_then_the_unlabelled_texts(tmp_path):
    """On real tweets: eval and train texts in the file are left out, the rest follow the train split
    with label −1 in the student's split (and its content key changes); the replicas' split is unchanged."""
    from workers.data.dataset_splits import load_splits
    from workers.data.text_tables import load_tweet_sentiment
    from workers.tasks.records import DataRequest, TrainJob
    from workers.tasks.resolve import content_key, training_split
    from workers.training.config import TrainConfig
    from workers.training.objectives import Objective

    plain = load_splits("tweet-sentiment", train_limit=600, eval_limit=400)
    corpus = load_tweet_sentiment()
    fresh = [t for t in corpus.texts[:3000] if t.strip() not in {s.strip() for s in plain.train.texts}][:300]
    fresh = [t for t in fresh if t.strip() not in {s.strip() for s in plain.eval.texts + plain.val.texts}][:200]
    rows = fresh + list(plain.eval.texts[:5]) + list(plain.train.texts[:5]) + fresh[:3]
    path = _unlabelled_file(tmp_path, rows)
    splits = load_splits("tweet-sentiment", train_limit=600, eval_limit=400, unlabelled=path)
    assert splits.unlabelled is not None and len(splits.unlabelled) == len({t.strip() for t in fresh})
    assert splits.unlabelled_dropped == len(rows) - len(splits.unlabelled)
    student = splits.distillation_split
    assert len(student) == len(plain.train) + len(splits.unlabelled)
    assert student.labels[: len(plain.train)].tolist() == plain.train.labels.tolist()
    assert set(student.labels[len(plain.train) :].tolist()) == {UNLABELLED}
    assert splits.train.texts == plain.train.texts and splits.fingerprint == plain.fingerprint
    request = DataRequest("tweet-sentiment", train_limit=600, eval_limit=400, unlabelled=str(path))
    assert content_key(request) != content_key(DataRequest("tweet-sentiment", train_limit=600, eval_limit=400))
    for distils in ("elodi", "kd", "fd-kl", "fd-lm"):  # every distillation term reads an unlabelled text
        job = TrainJob("s", request, "text-bag", TrainConfig(), "s.pt", Objective(distils))
        assert len(training_split(job)) == len(student)
    assert len(training_split(TrainJob("r", request, "text-bag", TrainConfig(), "r.pt"))) == len(plain.train)


def test_unlabelled_texts_with_images_is_one_line(tmp_path):
    from workers.data.dataset_splits import load_splits

    path = _unlabelled_file(tmp_path, ["a"])
    with pytest.raises(DataError, match="unlabelled texts go with text data; fashion-mnist holds images"):
        load_splits("fashion-mnist", train_limit=500, eval_limit=200, unlabelled=path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"method": {"name": "dynamic-fd"}, "old": "x.pt"}, "data.unlabelled: only a distilling student .kd, fd-kl"),
        ({"method": {"name": "none"}}, "data.unlabelled: only a distilling student"),
        ({"data": {"dataset": "fashion-mnist", "unlabelled": "u.csv"}}, "unlabelled: texts without labels go with"),
        ({"data": {**TWEETS, "unlabelled": "u.txt"}}, "unlabelled: u.txt is not a local .csv, .tsv, .jsonl or"),
        ({"data": {"path": "shards/*.parquet", "unlabelled": "u.csv"}}, "go with data held in memory; this source"),
    ],
)
def test_the_spec_refuses_unlabelled_texts_where_nothing_would_read_them(change, message):
    spec = {"model": "tw", "version": "v1", "arch": "text-bag", "data": {**TWEETS, "unlabelled": "u.csv"}}
    spec["method"] = {"name": "elodi", "m": 2}
    with pytest.raises(Exception, match=message):
        parse_spec({**spec, **change})


def test_a_large_table_that_streams_refuses_unlabelled_texts(tmp_path):
    from orchestrator.planning.streaming import stream_problems
    from workers.tasks.records import DataRequest

    request = DataRequest("big.csv", unlabelled="u.csv", streamed=object())  # type: ignore[arg-type]
    assert any("data.unlabelled: unlabelled texts go with data held in memory" in p for p in stream_problems(request))


def test_an_elodi_update_distils_on_unlabelled_texts_through_the_pool(ray_cluster, tmp_path):
    """Replicas train on the 600 labelled tweets; the student's epoch covers them and the unlabelled
    texts, its teacher pool's actor serving every batch (indices past the labelled split included);
    the run records how many texts were kept and left out."""
    from mlflow import MlflowClient

    from conftest import run_update
    from workers.data.dataset_splits import load_splits
    from workers.data.text_tables import load_tweet_sentiment

    plain = load_splits("tweet-sentiment", train_limit=600, eval_limit=400)
    labelled = {t.strip() for t in plain.train.texts + plain.val.texts + plain.eval.texts}
    fresh = list(dict.fromkeys(t for t in load_tweet_sentiment().texts[:4000] if t.strip() not in labelled))[:300]
    path = _unlabelled_file(tmp_path, fresh + list(plain.eval.texts[:7]))
    batch = 64
    result = run_update(
        {
            "model": "tw-unlabelled",
            "version": "v1",
            "arch": "text-bag",
            "storage": str(tmp_path / "runs"),
            "data": {**TWEETS, "unlabelled": str(path)},
            "method": {"name": "elodi", "m": 2, "k": 3},
            "train": {"epochs": 1, "batch_size": batch, "lr": 0.5},
            "resources": {**SPEC_RESOURCES, "teacher_actors": 1},
        },
        tmp_path / "v1",
    )
    assert result.registered_version == "1"
    assert [r.steps for r in result.replicas] == [math.ceil(len(plain.train) / batch)] * 2
    assert result.student.steps == math.ceil((len(plain.train) + len(fresh)) / batch)
    assert result.teacher_pool is not None and result.teacher_pool.batches_served == result.student.steps
    metrics = MlflowClient().get_run(result.run_id).data.metrics
    assert metrics["data.unlabelled"] == len(fresh) and metrics["data.unlabelled_dropped"] == 7
    assert json.loads(json.dumps(result.student.classes_seen)) == [0, 1, 2]


@pytest.fixture(scope="module")
def text_bag_and_unlabelled_texts(tmp_path_factory):
    """A text-bag trained one epoch on 600 tweets (a teacher or an old model), the 250 tweets beyond
    the splits as an unlabelled table, and what a student of it needs: (the trained model's record,
    the labelled split, the unlabelled texts, the data request reading them, the training config, the
    tokenizer). Trained once for the module: the tests that read it train students of their own."""
    from dataclasses import replace

    from benchmarks.fidelity.inputs import inputs_of
    from workers.data.dataset_splits import load_splits
    from workers.data.text_tables import load_tweet_sentiment
    from workers.tasks.bodies import train_job
    from workers.tasks.records import DataRequest, TrainJob
    from workers.training.config import TrainConfig

    tmp_path = tmp_path_factory.mktemp("unlabelled-teacher")
    plain = load_splits("tweet-sentiment", train_limit=600, eval_limit=400)
    labelled = {t.strip() for t in plain.train.texts + plain.val.texts + plain.eval.texts}
    fresh = list(dict.fromkeys(t for t in load_tweet_sentiment().texts[:4000] if t.strip() not in labelled))[:250]
    data = DataRequest("tweet-sentiment", train_limit=600, eval_limit=400)
    inputs = inputs_of(data, "text-bag", 32)
    config = TrainConfig(epochs=1, batch_size=64, lr=0.5, weight_decay=0.0)
    trained = train_job(TrainJob("t", data, "text-bag", config, str(tmp_path / "t.pt"), inputs=inputs))
    with_texts = replace(data, unlabelled=str(_unlabelled_file(tmp_path, fresh)))
    return trained, plain.train, fresh, with_texts, replace(config, seed=1), inputs


def test_in_process_teachers_serve_the_unlabelled_texts_too(text_bag_and_unlabelled_texts, tmp_path):
    """An ELODI student whose teachers run in its own process (no pool) reads its batches, unlabelled
    indices included, through them: one epoch covers the labelled tweets and the unlabelled texts."""
    from workers.tasks.bodies import train_job
    from workers.tasks.records import TrainJob
    from workers.training.objectives import Objective

    teacher, train, fresh, with_texts, config, inputs = text_bag_and_unlabelled_texts
    student = TrainJob(
        "s",
        with_texts,
        "text-bag",
        config,
        str(tmp_path / "s.pt"),
        Objective("elodi", k=3),
        teachers=(("teacher", (teacher.checkpoint,)),),
        inputs=inputs,
    )
    record = train_job(student)
    assert teacher.steps == math.ceil(len(train) / 64)
    assert record.steps == math.ceil((len(train) + len(fresh)) / 64) and record.classes_seen == [0, 1, 2]


def test_a_kd_student_distils_from_the_old_model_on_the_unlabelled_texts_too(text_bag_and_unlabelled_texts, tmp_path):
    """KD (and FD) read `data.unlabelled` as ELODI does: one epoch of a KD student covers the labelled
    tweets and the unlabelled texts, its old model computing logits on both (no label needed)."""
    from workers.tasks.bodies import train_job
    from workers.tasks.records import TrainJob
    from workers.training.objectives import Objective

    old, train, fresh, with_texts, config, inputs = text_bag_and_unlabelled_texts
    for method in ("kd", "fd-lm"):
        student = TrainJob(
            method,
            with_texts,
            "text-bag",
            config,
            str(tmp_path / f"{method}.pt"),
            Objective(method),
            teachers=(("old", (old.checkpoint,)),),
            inputs=inputs,
        )
        record = train_job(student)
        assert record.steps == math.ceil((len(train) + len(fresh)) / 64) and record.classes_seen == [0, 1, 2]


def test_an_unlabelled_table_with_a_label_column_is_one_line_and_exit_2_from_check(tmp_path, capsys):
    """Labelled rows among the unlabelled would be distilled on without their labels: `congruent
    check` refuses the table in one line naming the file and the column."""
    import yaml

    from orchestrator.cli import main

    path = tmp_path / "more.csv"
    path.write_text("text,label\nlovely flight,positive\nlost my bag,negative\n")
    spec = {
        "model": "tw",
        "version": "v2",
        "arch": "text-bag",
        "old": str(tmp_path / "missing.pt"),
        "data": {**TWEETS, "unlabelled": str(path)},
        "method": {"name": "kd"},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["check", str(tmp_path / "spec.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{path}: has a label column 'label'; unlabelled texts come without labels" in err
    path.write_text("text\nlovely flight\nlost my bag\n")  # without it: that line is gone
    main(["check", str(tmp_path / "spec.yaml")])
    assert "has a label column" not in capsys.readouterr().err
