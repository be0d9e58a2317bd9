"""Settings that point at the embedded services: the URLs ``preagg services up`` left, and their defaults.

Apart from :mod:`pipeline.services.embedded` (which starts and stops the servers):
this only rewrites settings, and says in one line when nothing runs.
"""

from __future__ import annotations

from pipeline.services.embedded import Endpoints, read_state
from pipeline.settings import Settings, SettingsError

#: Split width used on the embedded SecantusDB (see Settings.max_fields_per_update).
EMBEDDED_FIELDS_PER_UPDATE = 64


class ServicesNotRunning(SettingsError):
    """No URL is configured and no embedded services run: the CLI prints it as one line, exit 2."""


def resolve(settings: Settings) -> Settings:
    """Fill missing URLs from the services started by ``preagg services up``."""
    if settings.kafka_url and settings.mongo_url:
        return settings
    state = read_state(settings.home)
    if state is None:
        missing = [
            n
            for n, v in (("PREAGG_KAFKA_URL", settings.kafka_url), ("PREAGG_MONGO_URL", settings.mongo_url))
            if not v
        ]
        raise ServicesNotRunning(
            f"no {' / '.join(missing)} set and no embedded services running under "
            f"{settings.home}: run `preagg services up` (or set the URLs)"
        )
    return for_embedded(settings, Endpoints(state["kafka_url"], state["mongo_url"]))


def for_embedded(settings: Settings, endpoints: Endpoints) -> Settings:
    """Settings pointing at embedded services, with the embedded store's defaults."""
    fields = settings.max_fields_per_update
    on_embedded_mongo = settings.mongo_url is None
    return settings.with_(
        kafka_url=settings.kafka_url or endpoints.kafka_url,
        mongo_url=settings.mongo_url or endpoints.mongo_url,
        max_fields_per_update=(
            EMBEDDED_FIELDS_PER_UPDATE if fields is None and on_embedded_mongo else fields
        ),
        auto_setup=True if settings.auto_setup is None else settings.auto_setup,
        embedded_kafka=settings.embedded_kafka or settings.kafka_url is None,
    )


def command_settings(resolve_urls: bool = True) -> Settings:
    """The environment's settings, with the embedded services' URLs filled in when none is set."""
    s = Settings.from_env()
    return resolve(s) if resolve_urls else s
