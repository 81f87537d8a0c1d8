"""Operator tools behind the ``metaquorum`` CLI (``log dump``, ``quorum describe``).

Each tool keeps its logic and its output formatting in pure functions that tests call directly;
``quorum/cli.py`` only parses arguments and calls them.
"""
