"""The store: the LMDB environment, the LSM core and the :class:`Store` facade."""

from fpstore.store.opening import open
from fpstore.store.results import AddResult, Cluster, Document, Match
from fpstore.store.store import Store

__all__ = ["AddResult", "Cluster", "Document", "Match", "Store", "open"]
