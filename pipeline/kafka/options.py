"""Client security options from settings: Kafka SASL/TLS for every Kafka client.

MongoDB credentials and TLS options travel inside ``PREAGG_MONGO_URL`` (the
standard ``mongodb://user:pass@host/?tls=true&tlsCAFile=...`` form), so PyMongo
needs nothing here. Secrets never reach logs or metrics: :func:`pipeline.settings.redact_url`
masks URL passwords, and the SASL password is excluded from ``repr(Settings)``.
"""

from __future__ import annotations

import ssl
from typing import Any

from pipeline.settings import Settings

_SASL = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS = ("SSL", "SASL_SSL")


def kafka_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """A verifying TLS context when the protocol uses TLS, else ``None``."""
    if settings.kafka_security_protocol not in _TLS:
        return None
    ctx = ssl.create_default_context(cafile=settings.kafka_ssl_cafile or None)
    if settings.kafka_ssl_certfile:
        ctx.load_cert_chain(settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile or None)
    return ctx


def kafka_client_kwargs(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for aiokafka producers, consumers and admin clients."""
    protocol = settings.kafka_security_protocol
    if protocol not in ("PLAINTEXT", *_SASL, *_TLS):
        raise ValueError(f"unknown Kafka security protocol {protocol!r}")
    kwargs: dict[str, Any] = {"bootstrap_servers": settings.kafka_bootstrap, "security_protocol": protocol}
    ctx = kafka_ssl_context(settings)
    if ctx is not None:
        kwargs["ssl_context"] = ctx
    if protocol in _SASL:
        kwargs.update(
            sasl_mechanism=settings.kafka_sasl_mechanism,
            sasl_plain_username=settings.kafka_sasl_username,
            sasl_plain_password=settings.kafka_sasl_password,
        )
    return kwargs


def faust_credentials(settings: Settings) -> Any:
    """Faust's ``broker_credentials`` for the same options (``None`` for plaintext)."""
    import faust

    protocol = settings.kafka_security_protocol
    ctx = kafka_ssl_context(settings)
    if protocol in _SASL:
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password,
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=ctx,
        )
    if ctx is not None:
        return faust.SSLCredentials(ctx)
    return None
