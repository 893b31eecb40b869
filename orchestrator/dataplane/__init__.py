"""The streamed data plane: how a source too large for memory (text-table shards, an ImageFolder
tree, local or on S3) is listed, read, decoded, tokenized and kept, as Ray Data datasets whose
reading tasks run on the cluster's CPU workers and whose batches the training processes consume.

    objects.py         what reading tasks need to read S3 objects: the driver's S3 settings
    table_tasks.py     what a reading task does with a table's shards (read by the format's reader
                       in workers/data/formats/; keys, splits, token ids)
    image_tasks.py     what a reading task does with image files (read, decoded by the format's reader)
    ray_reading.py     files read by zero-CPU Ray Data tasks in a seeded order; the streams' context
    shuffle.py         the consumer's seeded shuffle buffer
    table_streams.py   `TableSplit`: a text table's splits as seeded epochs of batches
    image_streams.py   `ImageSplit`: an ImageFolder tree's splits the same way
    token_cache.py     `TokenCache`: a text split's first epoch kept on local disk for later epochs

Most of this runs inside Ray workers and Ray Data tasks, not in the driver. May import: ray,
pyarrow, `workers`, `orchestrator.host` — never mlflow, `orchestrator.driver`, `orchestrator.planning`,
`orchestrator.execution`, `orchestrator.jobs`, `orchestrator.commands` or `orchestrator.tracking`.
"""
