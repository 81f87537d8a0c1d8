"""Partition logs on leaders and followers, in Kafka's on-disk format
(docs/architecture.md#partition-logs): the record-batch codec and its checks (``batch.py``,
pure), segments and their indexes (``segment.py``, ``index.py``), checkpoint files
(``checkpoints.py``), the leader-epoch cache (``epochs.py``), opening a log (``loader.py``),
one partition's log (``partition_log.py``) and the broker's logs (``manager.py``)."""
