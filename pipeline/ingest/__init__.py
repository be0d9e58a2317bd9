"""Pure input handling: time parsing, validation, envelopes, file formats."""
