# Image of a preagg worker (and of the CLI, and of `preagg serve`) for docker-compose.yml and deploy/.
# Production image: real Kafka and MongoDB only (no embedded stand-ins: `preagg[embedded]` is not
# installed), versions pinned by deploy/constraints.txt (the ones the tests ran with), a non-root user.
FROM python:3.11-slim
# tini as PID 1: the kernel drops a signal to PID 1 that has no handler of its own, so a SIGTERM
# arriving before Python and Faust install theirs would wait out the whole grace period. tini
# forwards it to preagg (not PID 1, so the default action applies until the handlers exist)
# and reaps what the process leaves behind.
RUN apt-get update && apt-get install -y --no-install-recommends tini && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --gid 0 --home-dir /app --shell /usr/sbin/nologin preagg
WORKDIR /app
COPY deploy/constraints.txt ./constraints.txt
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY schemas ./schemas
# A regular (not editable) install: the wheel carries schemas/ as pipeline/_schemas.
RUN pip install --no-cache-dir -c constraints.txt . && chown -R 10001:0 /app
USER 10001
ENV PREAGG_HOME=/app/.preagg PREAGG_LOG_FORMAT=json
ENTRYPOINT ["/usr/bin/tini", "--", "preagg"]
CMD ["worker"]
