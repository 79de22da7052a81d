#!/usr/bin/env bash
# The GPU run kit's one command, for the lent GPU machine (no registry; Python 3.12 with torch already there):
#
#   bash scripts/gpu_run.sh OUT_DIR [BUDGET_S]        (docs/performance.md: the device call and its carry list)
#
# 1. says at once, without a traceback, when no GPU is visible (exit 2) or the kit is missing/broken (exit 3);
# 2. installs the wheels in .whl/ (`make gpu-kit`) into a temporary folder with --no-index --no-deps and puts
#    it and src/ on the path; checks the imports and that torch sees the GPU;
# 3. runs scripts/gpu_check.py's stages in priority order inside BUDGET_S (default 480 s, the whole script),
#    each writing its result under OUT_DIR as it finishes, so a stop at the limit keeps what was measured.
# Exit: 0 every stage passed, 1 a stage failed (its figures are still in OUT_DIR), 2 no GPU, 3 no usable kit.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 3
start=$(date +%s)
out=${1:-}
budget=${2:-480}
if [ -z "$out" ]; then
  echo "error: no output folder: usage: bash scripts/gpu_run.sh OUT_DIR [BUDGET_S] (on the device machine: \"\$OUT\")" >&2
  exit 3
fi
mkdir -p "$out" || { echo "error: cannot create the output folder $out" >&2; exit 3; }
log="$out/gpu_run.log"
exec > >(tee -a "$log") 2>&1
py=${PYTHON:-python3}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_run: no GPU visible here (nvidia-smi is missing or lists no device): nothing was measured." \
       "Run this on the lent GPU machine (docs/performance.md); on a CPU machine use make test / make bench."
  exit 2
fi
shopt -s nullglob
wheels=(.whl/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
  echo "gpu_run: no kit in .whl/: run \`make gpu-kit\` on a machine with PyPI and name .whl in the device call's carry list."
  exit 3
fi

site=$(mktemp -d /tmp/tb-kit-XXXXXX)
echo "gpu_run: installing ${#wheels[@]} wheels into $site (offline)"
if ! "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
       --target "$site" "${wheels[@]}"; then
  echo "gpu_run: the kit did not install on this Python ($("$py" -V 2>&1)): rebuild it with \`make gpu-kit\`."
  exit 3
fi
export PYTHONPATH="$site:$here/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true
"$py" - <<'EOF'
import importlib, sys
missing = []
for mod in ("hydra", "omegaconf", "mlflow", "sqlalchemy", "alembic", "databento", "databento_dbn", "zstandard",
            "scipy", "pandas", "matplotlib", "psutil", "pynvml", "yaml", "trainbench.cli", "trainbench.analysis.pipeline"):
    try:
        importlib.import_module(mod)
    except Exception as e:  # report every missing import at once
        missing.append(f"{mod} ({type(e).__name__}: {e})")
import torch
print(f"gpu_run: Python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"GPU visible to torch: {torch.cuda.is_available()}")
if missing:
    print("gpu_run: these imports failed: " + "; ".join(missing))
    sys.exit(3)
if not torch.cuda.is_available():
    print("gpu_run: nvidia-smi lists a GPU but torch cannot use it: nothing was measured.")
    sys.exit(2)
EOF
rc=$?
[ $rc -eq 0 ] || exit $rc

left=$(( budget - ($(date +%s) - start) - 10 ))
echo "gpu_run: kit ready after $(( $(date +%s) - start )) s; stages get ${left} s"
timeout --kill-after=10 "$left" "$py" scripts/gpu_check.py --out-dir "$out" --budget-s "$((left - 5))"
rc=$?
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
  echo "gpu_run: the stages ran past ${left} s and were stopped; what finished is in $out"
  rc=1
fi
echo "gpu_run: done in $(( $(date +%s) - start )) s (exit $rc); files in $out:"
ls -la "$out"
exit $rc
