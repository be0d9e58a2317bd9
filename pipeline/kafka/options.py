"""How every Kafka client connects: brokers, SASL and TLS (:class:`KafkaConnection`).

MongoDB credentials and TLS options travel inside ``PREAGG_MONGO_URL`` (the
standard ``mongodb://user:pass@host/?tls=true&tlsCAFile=...`` form), so PyMongo
needs nothing here. Secrets never reach logs or metrics: :func:`pipeline.settings.redact_url`
masks URL passwords, and the SASL password is excluded from ``repr(Settings)``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from pipeline.settings import Settings

_SASL = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS = ("SSL", "SASL_SSL")


@dataclass(frozen=True)
class KafkaConnection:
    """How to reach and authenticate to the brokers: all a Kafka client of preagg needs.

    The adapters take this, not the whole :class:`~pipeline.settings.Settings`; the
    worker, the CLI and the tests build it once with :meth:`of`.
    """

    #: Bootstrap servers, ``host:port[,host:port]``.
    bootstrap: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""

    @classmethod
    def of(cls, settings: Settings) -> KafkaConnection:
        """The connection ``PREAGG_KAFKA_*`` describe."""
        return cls(
            settings.kafka_bootstrap,
            settings.kafka_security_protocol,
            settings.kafka_sasl_mechanism,
            settings.kafka_sasl_username,
            settings.kafka_sasl_password,
            settings.kafka_ssl_cafile,
            settings.kafka_ssl_certfile,
            settings.kafka_ssl_keyfile,
        )

    def ssl_context(self) -> ssl.SSLContext | None:
        """A verifying TLS context when the protocol uses TLS, else ``None``."""
        if self.security_protocol not in _TLS:
            return None
        ctx = ssl.create_default_context(cafile=self.ssl_cafile or None)
        if self.ssl_certfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile or None)
        return ctx

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for aiokafka producers, consumers and admin clients."""
        protocol = self.security_protocol
        if protocol not in ("PLAINTEXT", *_SASL, *_TLS):
            raise ValueError(f"unknown Kafka security protocol {protocol!r}")
        kwargs: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "security_protocol": protocol}
        ctx = self.ssl_context()
        if ctx is not None:
            kwargs["ssl_context"] = ctx
        if protocol in _SASL:
            kwargs.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        return kwargs

    def faust_credentials(self) -> Any:
        """Faust's ``broker_credentials`` for the same options (``None`` for plaintext)."""
        import faust

        ctx = self.ssl_context()
        if self.security_protocol in _SASL:
            return faust.SASLCredentials(
                username=self.sasl_username,
                password=self.sasl_password,
                mechanism=self.sasl_mechanism,
                ssl_context=ctx,
            )
        if ctx is not None:
            return faust.SSLCredentials(ctx)
        return None


def kafka_client_kwargs(settings: Settings) -> dict[str, Any]:
    """:meth:`KafkaConnection.client_kwargs` of the settings' connection (tests, benchmarks)."""
    return KafkaConnection.of(settings).client_kwargs()
