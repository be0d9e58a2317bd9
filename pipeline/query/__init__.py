"""Analyst queries over the pre-aggregated documents."""
