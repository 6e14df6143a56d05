# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install demo test lint format serve worker beat admin bench clean

install: $(VENV)/.installed

$(VENV)/.installed: requirements/lock.txt
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required"'
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements/lock.txt
	touch $@

demo: install
	mkdir -p var
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py load_demo
	$(BIN)/python manage.py rate_snapshot
	@echo "Arena demo on http://$(HOST):$(PORT)/  (Ctrl-C to stop; 'make admin' creates a staff user)"
	$(BIN)/uvicorn config.asgi:application --host $(HOST) --port $(PORT) --ws websockets-sansio --ws-per-message-deflate False --lifespan off

test: install
	mkdir -p var
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy arena ratings config
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy arena ratings config

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

serve: install
	$(BIN)/uvicorn config.asgi:application --host $(HOST) --port $(PORT) --ws websockets-sansio --ws-per-message-deflate False --lifespan off

worker: install
	$(BIN)/celery -A config worker -Q default,ratings --loglevel INFO

beat: install
	$(BIN)/celery -A config beat --loglevel INFO

admin: install
	$(BIN)/python manage.py createsuperuser

bench: install
	$(BIN)/python bench/ratings.py
	$(BIN)/python bench/streaming.py

clean:
	rm -rf $(VENV) var staticfiles
