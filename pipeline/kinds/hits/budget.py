"""How many values a custom property may have, so that no daily document can pass 16 MB (pure).

A daily document holds ``props.<name key>.<value key>`` counters for every property
value counted on that page that day. Names per site and values per name are limited
by the name store, so the document's worst case is known in advance:
``props_max_names`` subdocuments, each with its values and one ``other``. The byte
budget ``props_max_doc_bytes`` is split evenly between names, and the values each
name may take are what fits in its share at the longest key the field-name mode
allows (a short token in compact mode, the escaped text in readable mode, where
``%``, ``.`` and ``$`` take three bytes). Past it, values count as ``other``.
MongoDB refuses a document over 16 MB; its minute and hour counters take about 30 KB.
"""

from __future__ import annotations

from pipeline.core.fields import FieldMode
from pipeline.kinds.hits.settings import HitsSettings

#: BSON bytes of one counter besides its key: type byte, the key's NUL, an int64 or a double.
COUNTER_BYTES = 10
#: BSON bytes of one property's subdocument besides its key and counters: type, NUL, length, end.
SUBDOC_BYTES = 7


def key_bytes(mode: FieldMode, max_text_bytes: int, tokens: int) -> int:
    """Longest field name of a name or value: a token below ``tokens`` or the escaped text (readable)."""
    if mode == "compact":
        return max(len(str(max(tokens - 1, 0))), len("other"))
    return max(3 * max_text_bytes, len("%other"), 1)


def values_per_name(s: HitsSettings, mode: FieldMode) -> int:
    """Values one property may take on a site: ``props_max_values``, or fewer if they would not fit."""
    share = s.props_max_doc_bytes // max(1, s.props_max_names)
    name_cost = SUBDOC_BYTES + key_bytes(mode, s.props_max_bytes, s.props_max_names)
    value_cost = COUNTER_BYTES + key_bytes(mode, s.props_max_bytes, s.props_max_values)
    fit = (share - name_cost) // value_cost - 1  # one counter stays for "other"
    return max(0, min(s.props_max_values, fit))


def worst_props_bytes(s: HitsSettings, mode: FieldMode) -> int:
    """BSON bytes of the largest ``props`` subdocument the limits allow (names, values, ``other``)."""
    values = values_per_name(s, mode)
    name = SUBDOC_BYTES + key_bytes(mode, s.props_max_bytes, s.props_max_names)
    value = COUNTER_BYTES + key_bytes(mode, s.props_max_bytes, s.props_max_values)
    other_name = SUBDOC_BYTES + len("%other") + value
    return 5 + s.props_max_names * (name + (values + 1) * value) + other_name
