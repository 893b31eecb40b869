"""What a job resolves to inside a worker process: its data splits (loaded once per process), its
model settings, its initial model, its in-process teachers, the old model's class ids on its val
split."""

from __future__ import annotations

import hashlib
from dataclasses import fields, replace
from functools import lru_cache

import torch

from workers.data import DataSplits, load_splits
from workers.data.dataset_splits import Samples, fingerprint
from workers.data.encoded import EncodedSplit
from workers.data.folds import cross_fold
from workers.data.input_spec import InputSpec
from workers.data.protected_rows import with_protected
from workers.data.split_port import Split
from workers.models.checkpoints import CheckpointError, ModelSettings, classes_seen_of, load_model
from workers.models.hf import hf_directory, pretrained_state, read_directory
from workers.models.predict import predict_logits
from workers.models.starting_weights import freeze_backbone, initialise, load_weights
from workers.names import UNLABELLED_OBJECTIVES, is_hf
from workers.storage import fetch_checkpoint
from workers.tasks.records import STREAM_FIELDS, DataRequest, TrainJob
from workers.teachers.frozen import FrozenModels, LocalTeachers


@lru_cache(maxsize=4)
def cached_splits(request: DataRequest) -> DataSplits:
    """The request's splits: loaded here (once per process), or the streamed splits the driver
    opened and the request carries (their samples are read as batches, never held); with `fold`,
    that fold of the request's splits (workers/data/folds.py)."""
    streamed = request.streamed
    if streamed is not None:
        return DataSplits(streamed.train, streamed.val, streamed.eval, streamed.fingerprint, streamed.source, "all")
    if request.fold is not None:  # a cross-fitting fold of the request's own splits (loaded once per process)
        return cross_fold(cached_splits(replace(request, fold=None)), *request.fold)
    splits = load_splits(**{f.name: getattr(request, f.name) for f in fields(request) if f.name not in STREAM_FIELDS})
    return splits if request.protected is None else with_protected(splits, request.protected)


@lru_cache(maxsize=4)
def content_key(request: DataRequest) -> str:
    """sha256 over the train, validation and eval splits' content; 16 hex digits. With the spec
    hash and the seed it names a stage's checkpoint: same key, same inputs, so a finished stage is
    reused and never retrained, while a changed dataset under the same spec trains afresh. (The
    eval split's own fingerprint, `DataSplits.fingerprint`, names the split versions are compared on.)"""
    splits = cached_splits(request)
    if request.streamed is not None:  # its fingerprint is over the files and the split fractions
        return hashlib.sha256(f"streamed {splits.fingerprint}".encode()).hexdigest()[:16]
    train, val = splits.train, splits.val
    assert isinstance(train, Samples) and isinstance(val, Samples), "a request that streams returned above"
    parts: tuple[str, ...] = (fingerprint(train), fingerprint(val), splits.fingerprint)
    if splits.unlabelled is not None:  # what an ELODI student distils on besides
        parts += (fingerprint(splits.unlabelled),)
    return hashlib.sha256(" ".join(parts).encode()).hexdigest()[:16]


def training_split(job: TrainJob) -> Split:
    """What the job trains on: the training split, and for a distilling student (KD, FD, ELODI) the
    unlabelled texts after it (`DataSplits.distillation_split`; the teacher pool's actors hold the same,
    plan.splits.train_split)."""
    splits = cached_splits(job.data)
    return splits.distillation_split if job.objective.method in UNLABELLED_OBJECTIVES else splits.train


def settings_of(job: TrainJob) -> ModelSettings:
    """The job's model: its architecture, the data's classes, and what it reads — `job.inputs` (a
    text model's tokenizer, trained by the plan), else the images of its data."""
    splits = cached_splits(job.data)
    inputs = job.inputs if job.inputs is not None else InputSpec.image(splits.in_channels, splits.image_size)
    config = read_directory(str(hf_directory(job.arch))).config if is_hf(job.arch) else None
    return ModelSettings(job.arch, splits.num_classes, inputs, config, job.config.adapter)


def initial_model(job: TrainJob, data_parallel: bool = False) -> torch.nn.Module:
    """The job's model before training: built from its seed, then given `init`'s weights (a
    torchvision weights name or a state_dict file; the head stays fresh for another class count),
    an `hf:DIR` model its directory's, or `init_from`'s (BCWI's fine-tuning, `init: old`), which
    must be of the same architecture and shapes; `data_parallel`: its BatchNorm layers as
    `data_parallel_batchnorm` makes them; with `freeze: backbone` only its classifier head trains.
    With an adapter (`train.adapter`) the starting weights are the base's, and the adapter is added
    on top of them (an `init_from` checkpoint holds its own adapter)."""
    settings = settings_of(job)
    adapter_later = settings.adapter is not None and job.init_from is None
    base = replace(settings, adapter=None) if adapter_later else settings
    model = base.build(job.config.seed, job.allow_user_factories)
    if job.init is not None:
        initialise(model, job.arch, job.init)
    elif is_hf(job.arch) and job.init_from is None:  # hf:DIR starts from the directory's own weights
        directory = str(hf_directory(job.arch))
        load_weights(model, pretrained_state(directory), f"hf:{directory}", stem_may_differ=False)
    if job.init_from is not None:
        start, start_settings = load_model(fetch_checkpoint(job.init_from), job.allow_user_factories)
        if start_settings != settings:
            raise CheckpointError(f"{job.init_from}: built as {start_settings}, cannot start {settings}")
        model.load_state_dict(start.state_dict())
    if adapter_later:
        model = settings.build_adapter(model, job.config.seed)
    if data_parallel:
        model = data_parallel_batchnorm(model, torch.device(job.config.device))
    if job.config.freeze == "backbone":  # after the conversion: its eval-mode hooks sit on the new layers
        freeze_backbone(model)
    return model


def data_parallel_batchnorm(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """For data-parallel training: on CUDA devices (nccl) every BatchNorm layer becomes a
    `SyncBatchNorm`, which normalises each step by the mean and variance of the whole batch across
    the workers, as one process would. SyncBatchNorm runs on GPUs only, so on CPUs (gloo) the layers
    stay as they are and differ from one process in exactly this: each worker normalises its shard
    (batch_size / workers samples) by the shard's own statistics, and the running statistics that
    evaluation and the checkpoint keep are rank 0's (DistributedDataParallel broadcasts rank 0's
    buffers at every forward pass), gathered from its shards only."""
    if device.type == "cuda":
        return torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
    return model


def local_teachers(job: TrainJob) -> LocalTeachers | None:
    """The job's teachers in this process, on its device, in its precision: the logit source
    without any hop, for teachers that share the student's device. Each group reads the training
    split as its own models were trained to read it — text through their tokenizer, images
    normalised by their `InputSpec`'s mean and std (the old model's may differ from the student's) —
    through the split's own reader for those inputs: a held split's batches rebuilt from their
    indices and augmentation draws (one device copy of the uint8 images shared by the groups), as
    the pool's actors do (workers/teachers/actor.py), a streamed batch read as it carries its
    samples; so a setting of `resources` never changes what a teacher sees."""
    if not job.teachers:
        return None
    train = training_split(job)
    device = torch.device(job.config.device)
    images_on_device: list[torch.Tensor] = []
    groups = {}
    for name, uris in job.teachers:
        loaded = [load_model(fetch_checkpoint(uri), job.allow_user_factories) for uri in uris]
        specs = {settings.inputs for _, settings in loaded}
        if len(specs) > 1:
            raise ValueError(f"the models of teacher group {name!r} read different inputs: {', '.join(uris)}")
        models = [model for model, _ in loaded]
        reader = train.reader(specs.pop())
        if isinstance(reader, EncodedSplit):  # a held split: batches are indices into it
            if reader.modality == "image":
                if not images_on_device:
                    images_on_device.append(reader.values.to(device))
                reader = replace(reader, values=images_on_device[0])
            groups[name] = FrozenModels(models, device, job.config.precision, reader)
        else:  # batches that carry their samples, each sample's logits kept by its id
            groups[name] = FrozenModels(models, device, job.config.precision, reader=reader, samples=len(train))
    return LocalTeachers(**groups)


@lru_cache(maxsize=4)
def reference_class_ids(uri: str, data: DataRequest, device: str, allow_user_factories: bool) -> torch.Tensor:
    """Class ids of the checkpoint at `uri` on the val split (what each epoch's val NFR counts
    against), -1 for samples of classes it was not trained on; read once per process."""
    path = fetch_checkpoint(uri)
    model, settings = load_model(path, allow_user_factories)
    val = cached_splits(data).val
    ids = predict_logits(model, val, device=device, inputs=settings.inputs).argmax(1)
    known = classes_seen_of(path)
    if known is not None:
        ids[~torch.isin(val.labels, torch.tensor(known))] = -1
    return ids


def val_reference(job: TrainJob) -> torch.Tensor | None:
    """The old model's class ids on the val split, when the job records its val NFR."""
    if job.nfr_reference is None:
        return None
    return reference_class_ids(job.nfr_reference, job.data, job.config.device, job.allow_user_factories)
