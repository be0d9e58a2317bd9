# Image of a preagg worker (and of the CLI) for docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY schemas ./schemas
RUN pip install --no-cache-dir -e .
ENTRYPOINT ["preagg"]
CMD ["worker"]
