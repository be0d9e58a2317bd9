"""Name store: short, stable tokens for names nobody knows in advance (custom property names and values).

Public API: :class:`NameCache` (what a worker uses), :class:`NameStore` (the MongoDB
documents), :mod:`~pipeline.store.names.layout` (the pure rules). See docs/name-store.md.
"""

from pipeline.store.names.cache import NameCache
from pipeline.store.names.layout import OTHER
from pipeline.store.names.store import NameStore

__all__ = ["OTHER", "NameCache", "NameStore"]
