"""Rejections as values: why one input was refused, with the input as it came.

A rejection carries a short reason code (counted per reason in metrics and status),
a human detail, and the original bytes (sent to the dead-letter topic unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one input was refused, with the input as it came."""

    reason: str
    detail: str
    raw: bytes
