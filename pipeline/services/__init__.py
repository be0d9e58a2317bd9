"""Embedded default services (Tansu Kafka broker, SecantusDB): supervision and URL resolution."""
