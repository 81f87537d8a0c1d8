"""Analytics over the metadata log with PySpark (docs/architecture.md#analytics).

``source``: the ``metaquorum`` Python data source (one input partition per segment, typed rows);
``jobs``: the replay jobs built on it (topic lifecycle, name reuse, partitions per broker,
leadership timeline, broker events, state as of an offset); ``report``: the Markdown report
and its plots; ``replay``: ``metaquorum replay``, which runs them all and writes Parquet.

Importing this package imports nothing heavy; ``pyspark`` is needed only by the submodules.
"""
