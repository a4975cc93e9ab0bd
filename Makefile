# Newcomer commands: `make demo` (install + the main job) and `make test` (install + all tests).
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
NAME ?=
# rustup installs cargo under ~/.cargo/bin, which a non-login shell may not have on PATH.
CARGO := $(shell command -v cargo || echo $(HOME)/.cargo/bin/cargo)

.PHONY: setup demo test lint fuzz bench clean

setup:
	./deploy/install.sh

demo: setup
	$(VENV)/bin/ccscope demo

test: setup
	$(VENV)/bin/ruff check .
	$(CARGO) test --release --quiet --manifest-path capture/link/Cargo.toml
	$(CARGO) test --release --quiet --manifest-path capture/tcpget/Cargo.toml
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fuzz: setup
	$(PY) tests/fuzz/fuzz_pcap.py -max_total_time=$${FUZZ_SECONDS:-60}

bench: setup
	@test -n "$(NAME)" || { echo "usage: make bench NAME=<$(shell ls bench | grep -v results | tr '\n' '|')>"; exit 2; }
	$(PY) bench/$(NAME)/run.py --out bench/results/$(NAME).json

clean:
	-capture/link/target/release/ccscope-link --cleanup
	rm -rf runs
