# The two commands of the README: `make demo` and `make test`. Each sets itself up on a fresh
# Linux x86_64 machine with python3.12 (or 3.10) and a C++ compiler.
SHELL := /bin/bash
VENV ?= .venv
PYTHON_BASE := $(shell tools/find_python.sh)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.ttdecode-installed
# torch is pinned to the release whose cp312 wheel this project is tested with (CPU use only).
TORCH := torch==2.9.1

.PHONY: demo test test-fast setup system-deps clean

demo: $(STAMP)
	$(PY) -m ttdecode demo

# `make test`: the whole suite. `make test-fast`: without the tests marked slow (-m "not slow"; tests/mock
# and the long cases).
test: $(STAMP) system-deps
	TTDECODE_REQUIRE_TTNN=1 $(PY) -m pytest -q -ra --durations=15

test-fast: $(STAMP) system-deps
	TTDECODE_REQUIRE_TTNN=1 $(PY) -m pytest -q -ra -m "not slow" --durations=15

setup: $(STAMP) system-deps

# PYTHONWARNINGS silences setuptools' fixed note on editable installs ("be careful with folders
# named like your package"), printed because kernels/ is mapped to ttdecode.kernels.
$(STAMP): pyproject.toml Makefile
	@test -n "$(PYTHON_BASE)" || { echo "no python3.12/3.10 found (see tools/find_python.sh)"; exit 1; }
	@test -x $(PY) || { echo "==> creating the virtual environment $(VENV) with $(PYTHON_BASE)"; \
	    $(PYTHON_BASE) -m venv $(VENV); }
	@echo "==> upgrading pip in $(VENV)"
	@$(PY) -m pip install --quiet --upgrade pip
	@echo "==> installing $(TORCH) (with its CUDA libraries, unused), ttnn, matplotlib, transformers, the test tools and ttdecode (editable) into $(VENV)"
	@echo "    about 4 GB to download and 7 GB on disk the first time (minutes); pip is quiet until it is done"
	@PYTHONWARNINGS="ignore:Editable installation" $(PY) -m pip install --quiet "$(TORCH)" -e '.[ttnn,plots,llama,test]'
	@touch $(STAMP)
	@echo "==> $(VENV) is ready"

# clang-19, lld-19 and the riscv64 libstdc++ headers compile and link our kernels against the real
# tt-metal headers of the ttnn wheel: the stand-in SFPI compiler of the mock Wormhole
# (ttdecode/testing/, tests/mock/); its riscv64-linux-gnu-g++ (GCC 12) compiles them again as a second
# front end (ttdecode/testing/gcc_front_end.py).
system-deps:
	@if ! command -v clang-19 >/dev/null 2>&1 || ! command -v ld.lld-19 >/dev/null 2>&1 || [ ! -d /usr/riscv64-linux-gnu/include/c++ ] || ! command -v riscv64-linux-gnu-g++ >/dev/null 2>&1; then \
	    echo "==> installing clang-19, lld-19 and g++-riscv64-linux-gnu with apt-get (Debian; sudo unless root)"; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq clang-19 lld-19 g++-riscv64-linux-gnu >/dev/null; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
