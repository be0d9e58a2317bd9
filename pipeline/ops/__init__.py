"""Operator tools: consumer lag, catching up, group status."""
