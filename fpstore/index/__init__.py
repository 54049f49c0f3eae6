"""The index: table designs (Manku's permuted blocks), the sorted-run codec, the immutable tier of
runs and key segments, and exact candidate search.

Beside :mod:`fpstore.fingerprint` in the data flow, below the store: it never imports the store.
"""
