"""One reader per data format — the module both ways of reading a dataset use: in memory
(workers/data/text_tables.py, workers/data/sources.py) and streamed, by Ray Data's reading tasks and
the stream's scan (orchestrator/dataplane/table_tasks.py, image_tasks.py, table_streams.py). As Ray
Data keeps one datasource per format, a format's options and refusals live in one file:

    delimited.py     CSV (RFC 4180 quoting) and TSV (IANA: no quoting), every column a string
    jsonl.py         JSON Lines, types as JSON gives them
    parquet.py       Parquet, columns as stored
    image_folder.py  an ImageFolder tree: a file's pixels, one at a time or the tree whole
    idx.py           IDX files (MNIST's), read whole
    npz.py           .npz arrays x and y, read whole
    rows.py          what the table readers share: a row as read, a column's values

The table readers and image_folder.py import no torch (a streamed reading task loads none); errors
are pyarrow's or PIL's, worded by each caller, or a DataError naming the file.
"""
