"""Analytics over the metadata log with PySpark (docs/architecture.md#analytics).

``source``: the ``metaquorum`` Python data source (input partitions of segments and checkpoints,
typed rows), built from ``schema`` (the columns and which record field fills which),
``log_files`` (listing the files, walking one partition's frames), ``typed_decode`` (batch
bodies into typed records) and ``arrow_batches`` (typed records into the Arrow batches the
source yields); ``jobs``: the replay jobs built on it (topic lifecycle, name reuse, partitions
per broker, leadership timeline, broker events, state as of an offset); ``report``: the
Markdown report and its plots; ``replay``: ``metaquorum replay``, which runs them all and
writes Parquet, on a cluster too: ``pack`` packs (and caches) the Python environment it ships
to the executors, ``failure`` reports a failed job by its root cause and the executor's log.
``stream``: the same source as a Structured Streaming source (``readStream``), following a
live log's end with ``log_tail``; ``follow``: ``metaquorum replay --follow``, which streams the
records into Parquet exactly once across restarts, and ``follow_tables``, which keeps every
replay table current beside it (recomputed from the records, swapped in whole).

Importing this package imports nothing heavy; ``pyspark`` is needed only by the submodules.
"""
