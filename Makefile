# Two commands: `make demo` and `make test`. Everything else is set-up they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MPY_PKG := @micropython/micropython-webassembly-pyscript@1.27.0
MPY_DIR := .tools/micropython
MPY_MJS := $(MPY_DIR)/node_modules/@micropython/micropython-webassembly-pyscript/micropython.mjs

.PHONY: demo test venv deps-test mosquitto micropython umqtt stubs bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,eval]'
	touch $@

venv: $(VENV)/.installed

# Debian packages the tests use: a real Mosquitto, its command-line clients
# (the compose healthcheck runs mosquitto_sub), and docker-compose (only to
# validate docker-compose.yml offline; no Docker engine is needed).
mosquitto:
	@missing=""; \
	{ command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto; } || missing="$$missing mosquitto"; \
	command -v mosquitto_sub >/dev/null 2>&1 || missing="$$missing mosquitto-clients"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing with apt"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

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

deps-test: venv mosquitto micropython umqtt stubs

# pytest exits 5 when it ran no test; that must fail the build, and it does
# because make fails on any non-zero exit.
test: deps-test
	$(PY) -m pytest $(PYTEST_ARGS)

demo: venv
	$(VENV)/bin/rase demo

bench: deps-test
	$(PY) benchmarks/edge_agent.py

clean:
	rm -rf $(VENV) .tools .pytest_cache
