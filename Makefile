# Every target installs what it needs into .venv first (Python 3.11+ and make are all it takes).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install constraints docs-settings docs-schemas docs-map browser mongosh dashboard demo serve test test-unit lint bench bench-hits bench-scaling bench-relations bench-listens bench-props bench-steady bench-ingest bench-api bench-views bench-calendar bench-hostile bench-peers bench-top-pages bench-visitors bench-visits bench-store bench-seeds bench-first-answer chaos simulate drill-stop-together clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# -qq: errors only. A machine's pip.conf may name package folders that are not there,
	@# and pip warns about each once per package: a fresh clone's `make demo` printed ~100 such lines.
	$(PY) -m pip install -qq --upgrade pip
	$(PY) -m pip install -qq -e '.[dev,embedded,plot]'
	touch $(STAMP)

install: $(STAMP)

constraints: $(STAMP)  ## rewrite deploy/constraints.txt (the production image's pins) from .venv
	$(PY) -m benchmarks.constraints > deploy/constraints.txt

demo: $(STAMP)  ## generated traffic through the whole pipeline on the embedded services
	$(PY) -m pipeline demo

test: $(STAMP) browser mongosh  ## unit + integration tests (starts and stops its own Kafka and MongoDB, drives Chromium)
	$(PY) -m pytest -q -n 4 --dist worksteal --durations=12

browser:  ## Debian's Chromium for the dashboard's browser test (apt-get, as root or through sudo)
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); export DEBIAN_FRONTEND=noninteractive; \
	  $$SUDO apt-get install -y -qq chromium >/dev/null 2>&1 || \
	  { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }; }
	@chromium --version 2>/dev/null

MONGOSH_VERSION := 2.12.0
MONGOSH := $(VENV)/mongosh/node_modules/.bin/mongosh

mongosh: $(MONGOSH)  ## the MongoDB shell from the npm registry into .venv/mongosh (`preagg mongosh` finds it; the cookbook's tests run it)

$(MONGOSH):
	@command -v npm >/dev/null 2>&1 || { echo "make mongosh needs Node.js and npm (Debian: apt-get install npm)"; exit 1; }
	npm install --prefix $(VENV)/mongosh --no-audit --no-fund --loglevel=error mongosh@$(MONGOSH_VERSION)
	@$(MONGOSH) --version

serve: $(STAMP)  ## preagg serve on the services of `preagg services up` (or PREAGG_MONGO_URL)
	$(PY) -m pipeline serve

dashboard: $(STAMP)  ## the demo's services, a worker, live generated traffic and the dashboard, until Ctrl-C
	$(PY) -m pipeline demo --serve

test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check pipeline benchmarks tests
	$(VENV)/bin/mypy

bench: bench-hits bench-scaling bench-relations bench-listens bench-props bench-steady bench-ingest bench-api bench-views bench-calendar bench-hostile bench-rollups bench-top-pages bench-visitors chaos  ## measures and writes bench-results/*.json (figures quoted in docs/benchmarks.md)

bench-hits: $(STAMP)  ## naive vs packed vs single, freshness, access-log replay
	$(PY) -m benchmarks.hits --out bench-results/hits.json

bench-scaling: $(STAMP)  ## events/s with 1 and 2 worker replicas, CPU per process
	$(PY) -m benchmarks.scaling --out bench-results/scaling.json

bench-relations: $(STAMP)  ## impressions throughput and sizes; Bloom relations on MovieLens 100k
	$(PY) -m benchmarks.relations --out bench-results/relations.json

bench-listens: $(STAMP)  ## HLL accuracy and sizes, Last.fm through a worker, heard FPR, top-tags latency
	$(PY) -m benchmarks.listens --out bench-results/listens.json

bench-first-answer: $(STAMP) browser  ## a fresh clone's make demo, then make dashboard to its first chart in Chromium
	$(PY) -m benchmarks.first_answer --out bench-results/first-answer.json

bench-seeds: $(STAMP)  ## the seed's PostgreSQL + hll design (Debian packages, own cluster, .venv-pg) next to preagg on Last.fm listens
	$(PY) -m benchmarks.seeds --out bench-results/seeds.json

bench-props: $(STAMP)  ## compact schema + name store vs readable names: bytes per document, events/s with and without props
	$(PY) -m benchmarks.props --out bench-results/props.json

bench-ingest: $(STAMP)  ## one worker's read capacity: raw client, stock Faust, single/keyless/Filebeat/packed messages; shipper replays
	$(PY) -m benchmarks.ingest --out bench-results/ingest.json

bench-steady: $(STAMP)  ## 3-minute live streams of every kind with warm documents, a 30-day backfill, chunked reads by id
	$(PY) -m benchmarks.steady --out bench-results/steady.json

bench-calendar: $(STAMP)  ## 60 days of hits in UTC and Europe/Berlin: drain, bytes per daily document, chart reads; retention before/after
	$(PY) -m benchmarks.calendar --out bench-results/calendar.json

bench-views: $(STAMP)  ## the analysts' views against reading the documents and against the query layer, on a grid of shapes
	$(PY) -m benchmarks.views --out bench-results/views.json

bench-api: $(STAMP) browser  ## query API p50/p99 per endpoint on 200 pages x 30 days; dashboard time to first chart
	$(PY) -m benchmarks.api --out bench-results/api.json

bench-hostile: $(STAMP)  ## name-store bursts (100 new sites x 32 new properties): flush durations; 32 concurrent API clients under the concurrency bound
	$(PY) -m benchmarks.hostile --out bench-results/hostile.json

bench-peers: $(STAMP)  ## preagg against Quix Streams exactly-once (own venv .venv-quix) over a grid of shapes, a live row; shape options: python -m benchmarks.peers --help
	$(PY) -m benchmarks.peers --reps 2 --live long --out bench-results/peers.json

bench-store: $(STAMP)  ## the store's document updates per second by document size, with and without its oplog; per-document upserts against grouped update_many
	$(PY) -m benchmarks.store_updates --out bench-results/store-updates.json

bench-top-pages: $(STAMP)  ## top pages as written and sealed: the README's log, shuffled Zipf backfills of 10k and 100k pages
	$(PY) -m benchmarks.top_pages --out bench-results/top_pages.json

bench-visitors: $(STAMP)  ## unique visitors: sketch accuracy 100..1M, the access log against its raw lines, 100k pages; bytes and events/s on and off
	$(PY) -m benchmarks.visitors --out bench-results/visitors.json

bench-visits: $(STAMP)  ## visits: accuracy against the rule on the access log and generated visitors, cost on and off (backlogs and a live steady state), open visits' memory
	$(PY) -m benchmarks.visits --out bench-results/visits.json

bench-rollups: $(STAMP)  ## site charts before/after site rollups at 100..100k pages; ingest with and without rollups; a 1M-URL crawl
	git worktree add -f .bench-before 4a8ca27 >/dev/null 2>&1 || true
	$(PY) -m benchmarks.rollups --compare-tree .bench-before --out bench-results/rollups.json

simulate: $(STAMP)  ## seeded fault schedules (rival inserts, lost answers, kills, crashes at commit points): faults per kind, mismatches must be 0
	$(PY) -m benchmarks.simulate --schedules 20 --seed 1 --out bench-results/simulate.json

docs-settings: $(STAMP)  ## rewrite docs/design.md's settings table from the settings' comments
	$(PY) -m pipeline.settings_doc

docs-schemas: $(STAMP)  ## rewrite schemas/*/documents/ and schemas/views/ (JSON Schemas) from the declarations
	$(PY) -m pipeline.schema_files

docs-map: $(STAMP)  ## rewrite docs/design.md's module map from the tree and the modules' docstrings
	$(PY) -m pipeline.docs_map

drill-stop-together: $(STAMP)  ## the wedge drill: two workers stopped at once (SIGTERM, kill -9) after a rebalance, then a third; recovered, wedged or miscounted per run
	$(PY) -m benchmarks.stop_together --runs 6 --out bench-results/stop_together.json

chaos: $(STAMP)  ## kill -9 / injected crashes / scaling during ingest, 5 seeds; then the store down 90 s during a scale-up and one poison event per 1,000; mismatches must be 0
	$(PY) -m benchmarks.chaos --seeds 1 2 3 4 5 --out bench-results/chaos.json

clean:
	rm -rf $(VENV) .preagg bench-results .pytest_cache .mypy_cache .ruff_cache
