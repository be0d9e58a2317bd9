"""Settings from the environment, and secrets kept out of reprs, logs and client options by mistake."""

import ssl

import pytest

from pipeline.kafka.options import kafka_client_kwargs
from pipeline.settings import Settings, redact_url
from pipeline.worker.faults import parse_fault


def test_env_round_trip_and_types() -> None:
    s = Settings.from_env({"PREAGG_PARTITIONS": "7", "PREAGG_FLUSH_INTERVAL": "0.25", "PREAGG_DB": "x"})
    assert (s.partitions, s.flush_interval, s.db) == (7, 0.25, "x")
    again = Settings.from_env(s.to_env())
    assert again.with_(worker_id=s.worker_id) == s


def test_passwords_never_in_repr() -> None:
    s = Settings(mongo_url="mongodb://app:hunter2@db:27017/?tls=true", kafka_sasl_password="k-secret")
    text = repr(s)
    assert "hunter2" not in text and "k-secret" not in text
    assert "mongodb://app:***@db:27017/?tls=true" in text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mongodb://u:p@h1:1,h2:2/db", "mongodb://u:***@h1:1,h2:2/db"),
        (
            "mongodb+srv://u:p%40ss@cluster.example/?w=majority",
            "mongodb+srv://u:***@cluster.example/?w=majority",
        ),
        ("mongodb://h:27017/", "mongodb://h:27017/"),
        ("kafka:9092", "kafka:9092"),
        # Passwords with characters urlsplit cuts at, and secrets in options (all leaked before).
        ("mongodb://u:pa,ss@h1,h2/db", "mongodb://u:***@h1,h2/db"),
        ("mongodb://u:p/a?ss#x@h:1/db", "mongodb://u:***@h:1/db"),
        ("mongodb://u:p#ss@h/", "mongodb://u:***@h/"),
        (
            "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=kfp&tlsCAFile=/ca.pem",
            "mongodb://h/?tls=true&tlsCertificateKeyFilePassword=***&tlsCAFile=/ca.pem",
        ),
        (
            "mongodb://u@h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:tok",
            "mongodb://u@h/?authMechanism=MONGODB-AWS&authMechanismProperties=***",
        ),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_kafka_sasl_ssl_options() -> None:
    s = Settings(
        kafka_url="broker:9093",
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username="svc",
        kafka_sasl_password="pw",
    )
    kw = kafka_client_kwargs(s)
    assert kw["security_protocol"] == "SASL_SSL" and kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kw["sasl_plain_username"] == "svc" and kw["sasl_plain_password"] == "pw"
    assert (
        isinstance(kw["ssl_context"], ssl.SSLContext) and kw["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    )
    assert "sasl_mechanism" not in kafka_client_kwargs(Settings(kafka_url="b:1"))
    with pytest.raises(ValueError, match="security protocol"):
        kafka_client_kwargs(Settings(kafka_url="b:1", kafka_security_protocol="TLS"))


def test_fault_specs() -> None:
    assert parse_fault("") is None
    assert parse_fault("after-commit:2") == ("after-commit", 2, "")
    assert parse_fault("early-commit:1:hits-visits") == ("early-commit", 1, "hits-visits")
    for bad in ("after-commit", "sideways:1", "mid-commit:0"):
        with pytest.raises(ValueError):
            parse_fault(bad)


def test_producer_text_is_printed_escaped() -> None:
    """A site or page holding an escape sequence must not drive the operator's terminal."""
    from pipeline.core.text import printable

    assert printable("shop\x1b]0;owned\x07") == "shop\\x1b]0;owned\\x07"
    assert printable("/a\x9bb\u202ec\r\n") == "/a\\x9bb\\u202ec\\x0d\\x0a"
    assert printable("/über café 東京") == "/über café 東京"
