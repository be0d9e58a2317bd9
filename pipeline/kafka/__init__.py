"""Kafka adapters: client options and security, topics (admin), the producer, the partition probe.

Nothing here imports aiokafka until one of these modules is imported itself.
"""
