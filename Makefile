# Two commands: `make demo` and `make test`. Everything else is set-up they need.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MPY_PKG := @micropython/micropython-webassembly-pyscript@1.27.0
MPY_DIR := .tools/micropython
MPY_MJS := $(MPY_DIR)/node_modules/@micropython/micropython-webassembly-pyscript/micropython.mjs

.PHONY: demo test venv deps-test mosquitto micropython bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,eval]'
	touch $@

venv: $(VENV)/.installed

mosquitto:
	@command -v mosquitto >/dev/null 2>&1 || test -x /usr/sbin/mosquitto || { \
	  echo "installing mosquitto with apt"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq mosquitto >/dev/null; }

$(MPY_MJS):
	mkdir -p $(MPY_DIR)
	npm install --prefix $(MPY_DIR) --no-audit --no-fund --silent $(MPY_PKG)

micropython: $(MPY_MJS)

deps-test: venv mosquitto micropython

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
