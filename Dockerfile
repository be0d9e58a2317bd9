# Image of a preagg worker (and of the CLI) for docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY schemas ./schemas
# A regular (not editable) install: the wheel carries schemas/ as pipeline/_schemas.
RUN pip install --no-cache-dir .
ENTRYPOINT ["preagg"]
CMD ["worker"]
