# The README's commands. Each installs first (tools/install.sh is idempotent: seconds once done).
PY := .venv/bin/python
DEMO_CONFIG := configs/demo/segformer_afno_demo.py
DEMO_DIR := work_dirs/demo

.PHONY: install demo lint test test-fast clean-demo

install:
	bash tools/install.sh

# Generate the demo street scenes (if missing), train on CPU, evaluate, save overlays; the last
# lines say where each result is. Run again, --resume continues an interrupted training or
# reports the finished one (the evaluation runs again).
demo: install
	$(PY) tools/dataset/make_demo_data.py data/demo_cityscapes
	$(PY) tools/train.py $(DEMO_CONFIG) --work-dir $(DEMO_DIR) --resume
	$(PY) tools/test.py $(DEMO_CONFIG) "$$(cat $(DEMO_DIR)/last_checkpoint)" \
		--work-dir $(DEMO_DIR) --show-dir vis

# ruff (pyflakes, pycodestyle, import order; settings in pyproject.toml); CI runs it first.
lint: install
	$(PY) -m ruff check .

# The whole suite, slow end-to-end runs included (what CI runs), on TEST_JOBS pytest-xdist
# workers; a test file stays on one worker (its module fixtures are built once). TEST_JOBS=0: one
# process, no workers.
TEST_JOBS ?= 2
PYTEST := $(PY) -m pytest -q -rs -n $(TEST_JOBS) --dist loadfile

test: install
	$(PYTEST)

# Without the slow end-to-end runs.
test-fast: install
	$(PYTEST) -m "not slow"

clean-demo:
	rm -rf $(DEMO_DIR) data/demo_cityscapes
