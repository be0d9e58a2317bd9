"""Pure computation below every other layer: parsing, ids, times, sketches, filters, the commit port."""
