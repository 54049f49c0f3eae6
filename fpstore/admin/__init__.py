"""The operator's side: ``fpstore-admin``, ingest of JSONL, directories and WARC, export and import.

A shell over the public API (:func:`fpstore.open` and :class:`fpstore.Store`).
"""
