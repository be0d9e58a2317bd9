"""Embedded default services (Tansu Kafka broker, SecantusDB) and URL resolution."""

from pipeline.services.embedded import EmbeddedServices, Endpoints, resolve

__all__ = ["EmbeddedServices", "Endpoints", "resolve"]
