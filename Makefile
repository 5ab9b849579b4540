# Two commands: `make demo` and `make test`. Everything else is set-up they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MPY_PKG := @micropython/micropython-webassembly-pyscript@1.27.0
MPY_DIR := .tools/micropython
MPY_MJS := $(MPY_DIR)/node_modules/@micropython/micropython-webassembly-pyscript/micropython.mjs

.PHONY: demo test unit lint venv deps-test mosquitto faults observe-tools dashboard micropython umqtt stubs bench clean

# pip and the build backend's notices (an editable install warns by design)
# go to $(VENV)/install.log; it is shown only when the install fails.
$(VENV)/.installed: pyproject.toml
	@echo "creating $(VENV) with the project and its test extras (a minute or two; log: $(VENV)/install.log)"
	@$(PYTHON) -m venv $(VENV)
	@{ $(PY) -m pip install -q --upgrade pip && $(PY) -m pip install -q -e '.[test,eval]'; } \
	  > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; echo "pip install failed (log: $(VENV)/install.log)"; exit 1; }
	@touch $@

venv: $(VENV)/.installed

# Debian packages the tests use: a real Mosquitto, its command-line clients
# (the compose healthcheck runs mosquitto_sub), docker-compose (only to
# validate docker-compose.yml offline; no Docker engine is needed), dnsmasq
# (a real DNS server for the boards' own lookups), and a C compiler for the
# fault-injection shim.
mosquitto:
	@missing=""; \
	{ command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto; } || missing="$$missing mosquitto"; \
	command -v mosquitto_sub >/dev/null 2>&1 || missing="$$missing mosquitto-clients"; \
	{ command -v dnsmasq >/dev/null 2>&1 || test -x /usr/sbin/dnsmasq; } || missing="$$missing dnsmasq-base"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	command -v $(CC) >/dev/null 2>&1 || missing="$$missing gcc libc6-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing with apt"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# The faultfs shim (simulators/faults/faultfs.c): power cuts and disk errors
# for the fault tests and benchmarks/chaos.py, built from source here (no
# binary is committed); simulators.faults.faultfs.library() builds the same.
FAULTFS := .tools/faults/libfaultfs.so
$(FAULTFS): simulators/faults/faultfs.c | mosquitto
	mkdir -p $(@D)
	$(CC) -shared -fPIC -O2 -Wall -Wextra -Werror -o $@ $< -ldl -lpthread

faults: $(FAULTFS)

# Debian packages the observability tests use: a real Prometheus (its package
# brings promtool) and headless Chromium for the live page (docs/observability.md).
observe-tools:
	@SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); updated=""; \
	for pkg in prometheus:promtool chromium:chromium; do \
	  name=$${pkg%%:*}; tool=$${pkg#*:}; \
	  if ! command -v $$name >/dev/null 2>&1 || ! command -v $$tool >/dev/null 2>&1; then \
	    echo "installing $$name with apt"; \
	    [ -n "$$updated" ] || { $$SUDO apt-get update -qq; updated=1; }; \
	    recommends=$$( [ $$name = prometheus ] && echo --no-install-recommends ); \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$recommends $$name >/dev/null; \
	  fi; \
	done

# The live page's browser libraries (`rase dashboard`), from npm at pinned
# versions; their browser bundles are copied next to the page (they are in git
# there too, so a checkout and the image serve the page without npm), and the
# browser never fetches anything from the internet.
DASH_NPM := .tools/dashboard
DASH_VENDOR := fusion_center/dashboard/vendor
MQTT_JS := mqtt@5.16.0
UPLOT_JS := uplot@1.6.32
$(DASH_NPM)/.installed: Makefile
	mkdir -p $(DASH_NPM) $(DASH_VENDOR)
	npm install --prefix $(DASH_NPM) --no-audit --no-fund --silent $(MQTT_JS) $(UPLOT_JS)
	cp $(DASH_NPM)/node_modules/mqtt/dist/mqtt.min.js $(DASH_VENDOR)/
	cp $(DASH_NPM)/node_modules/mqtt/LICENSE.md $(DASH_VENDOR)/mqtt.LICENSE.md
	cp $(DASH_NPM)/node_modules/uplot/dist/uPlot.iife.min.js $(DASH_NPM)/node_modules/uplot/dist/uPlot.min.css \
	  $(DASH_VENDOR)/
	cp $(DASH_NPM)/node_modules/uplot/LICENSE $(DASH_VENDOR)/uplot.LICENSE
	touch $@

dashboard: $(DASH_NPM)/.installed

$(MPY_MJS):
	mkdir -p $(MPY_DIR)
	npm install --prefix $(MPY_DIR) --no-audit --no-fund --silent $(MPY_PKG)

micropython: $(MPY_MJS)

# umqtt.simple for board bundles, from the package index's standard API with a
# pinned sha256 (edge_agent/board_deps.py); the tests read it from here.
UMQTT_CACHE := .tools/cache
$(UMQTT_CACHE)/micropython-umqtt-simple-1.3.4/simple.py: $(VENV)/.installed
	RASE_CACHE_DIR=$(CURDIR)/$(UMQTT_CACHE) $(VENV)/bin/rase flash --download-umqtt

umqtt: $(UMQTT_CACHE)/micropython-umqtt-simple-1.3.4/simple.py

# The boards' own type stubs, one folder per port, for the device-core type check.
STUBS_VERSION := 1.29.0.post1
STDLIB_STUBS_VERSION := 1.29.0.post2
.tools/stubs/%/.installed: $(VENV)/.installed
	rm -rf $(@D)
	$(PY) -m pip install -q --no-deps --target $(@D) \
	  micropython-$*-stubs==$(STUBS_VERSION) micropython-stdlib-stubs==$(STDLIB_STUBS_VERSION)
	touch $@

stubs: .tools/stubs/esp32/.installed .tools/stubs/rp2/.installed

deps-test: venv mosquitto faults observe-tools dashboard micropython umqtt stubs

# pytest exits 5 when it ran no test; that must fail the build, and it does
# because make fails on any non-zero exit (each of the two runs must find tests).
# Two workers (pytest-xdist): first the tests without real brokers (CPU-bound),
# then the integration tests, which start brokers and processes and mostly wait
# on them, so that CPU-heavy unit tests never share the machine with them.
test: deps-test lint
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -n 2 -m "not integration" $(PYTEST_ARGS)
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -n 2 -m integration $(PYTEST_ARGS)

# Lint and types, 0 findings ([tool.ruff] and [tool.mypy] in pyproject.toml: the
# services, the shared library and the CPython agent; the device core is typed
# against the boards' stubs in its own test).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The fast loop: tests that need no broker, no node and nothing downloaded
# into .tools (marked `downloads`; `make test` runs them); it makes the venv.
unit: venv
	$(PY) -m pytest -q -n 2 -m "not integration and not micropython and not downloads" tests/unit $(PYTEST_ARGS)

demo: venv
	@$(VENV)/bin/rase demo

bench: deps-test
	$(PY) benchmarks/edge_agent.py

clean:
	rm -rf $(VENV) .tools .pytest_cache
