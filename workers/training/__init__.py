"""Training: the losses (`losses`) and objectives (`objectives`) of every method, a training's
settings, optimiser and schedule (`config`), the one epoch machinery (`epochs`), one model's steps
(`trainer`), m replicas stepped as one batched model (`packed`), BCWI's weight interpolation
(`bcwi`), and the interface the trainer reads teacher logits through (`references`). Builds on
workers/models and workers/data; the teachers themselves live in workers/teachers."""
