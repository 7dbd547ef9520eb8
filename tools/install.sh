#!/usr/bin/env bash
# Idempotent install of afno_seg into .venv/ (CPU machine; docs/install.md has GPU clusters).
#
#   bash tools/install.sh          # creates/updates .venv, then writes .venv/.afno_seg-installed
#
# Steps, each skipped when already done:
#   1. python3 -m venv .venv.
#   2. torch/torchvision at the pins of requirements.txt, then setuptools<81 (torch pulls the newest,
#      but mmcv's setup.py and mmengine import pkg_resources, which setuptools 81 removed).
#   3. mmcv with compiled ops. No CPU wheel exists, so it is built once from the sdist and the wheel
#      is cached in $AFNO_SEG_WHEEL_CACHE (default ~/.cache/afno_seg/wheels): later installs take
#      seconds. The build took 11-31 minutes on 2-core x86-64 machines (2026-12). torch 2.14's headers need C++20 while mmcv 2.1.0's setup.py hard-codes -std=c++17;
#      the unpacked sdist (a temporary folder, never site-packages) gets that one flag raised.
#   4. The rest of requirements.txt, then afno_seg itself (pip install -e .).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv="$root/.venv"
py="$venv/bin/python"
stamp="$venv/.afno_seg-installed"
cache="${AFNO_SEG_WHEEL_CACHE:-$HOME/.cache/afno_seg/wheels}"
pin() { grep -E "^$1==" requirements.txt | head -n1; }

# The stamp records the requirements it was made from: editing requirements.txt reinstalls.
want=$(sha256sum requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  exit 0
fi

log() { printf '[install] %s\n' "$*"; }

if [[ ! -x "$py" ]]; then
  log "creating $venv"
  python3 -m venv "$venv"
fi
pip=("$py" -m pip install --disable-pip-version-check -q)
if ! "$py" -c "import torch, torchvision" 2>/dev/null; then
  log "installing $(pin torch) $(pin torchvision) (taken from the local wheel store when present)"
  "${pip[@]}" "$(pin torch)" "$(pin torchvision)" "$(pin numpy)"
fi
# After torch, which pulls the newest setuptools: mmcv's setup.py imports pkg_resources.
"${pip[@]}" "$(grep -E '^setuptools' requirements.txt)" wheel

mmcv_pin=$(pin mmcv)
mmcv_version=${mmcv_pin#mmcv==}
if ! "$py" -c "import mmcv, mmcv.ops; assert mmcv.__version__ == '$mmcv_version'" 2>/dev/null; then
  torch_tag=$("$py" -c "import torch; print(torch.__version__.split('+')[0])")
  # One cache folder per torch version: the ops are compiled against torch's ABI.
  cache="$cache/torch$torch_tag"
  mkdir -p "$cache"
  cached=$(ls "$cache"/mmcv-"$mmcv_version"-*.whl 2>/dev/null | head -n1 || true)
  if [[ -z "$cached" ]]; then
    log "building $mmcv_pin with ops from source (11-31 minutes on 2 cores, once; cached in $cache)"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    # --no-build-isolation: setup.py imports torch to compile the ops against it.
    "$py" -m pip download -q --no-deps --no-binary :all: --no-build-isolation -d "$work" "$mmcv_pin"
    tar -xzf "$work"/mmcv-"$mmcv_version".tar.gz -C "$work"
    src="$work/mmcv-$mmcv_version"
    grep -q -- '-std=c++17' "$src/setup.py" || { echo "mmcv setup.py no longer says -std=c++17; review tools/install.sh" >&2; exit 1; }
    sed -i 's/-std=c++17/-std=c++20/g' "$src/setup.py"
    (cd "$src" && MMCV_WITH_OPS=1 FORCE_CUDA="${FORCE_CUDA:-0}" MAX_JOBS="$(nproc)" \
      "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" .)
    cp "$work"/dist/mmcv-*.whl "$cache"/
    cached=$(ls "$cache"/mmcv-"$mmcv_version"-*.whl | head -n1)
  fi
  log "installing $(basename "$cached")"
  "${pip[@]}" --no-deps --force-reinstall "$cached"
fi

log "installing the rest of requirements.txt and afno_seg (editable)"
grep -vE '^(torch|torchvision|mmcv)==' requirements.txt > "$venv/requirements-rest.txt"
"${pip[@]}" -r "$venv/requirements-rest.txt"
"${pip[@]}" --no-deps -e .

"$py" - <<'EOF'
import mmcv, mmcv.ops, mmseg.models, mmpretrain, torch, torchvision  # noqa: F401
import afno_seg  # noqa: F401
print(f'[install] ok: torch {torch.__version__}, torchvision {torchvision.__version__}, '
      f'mmcv {mmcv.__version__} (ops), mmseg ok')
EOF
echo "$want" > "$stamp"
