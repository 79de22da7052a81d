"""The run contract's names that a rerun reads and writes: tags, artifacts and per-epoch series.

Every other module of the package takes these strings from here, so that the whole vocabulary of
reruns is in one place (and ``docs/run-contract.md`` lists the same names).
"""

from __future__ import annotations

# --- what the original training run carries --------------------------------------------------------
TAG_KIND = "kind"
KIND_TRAIN = "train"  # the value of TAG_KIND on a run made by run.py (analysis runs have another)
TAG_MODEL = "model"
TAG_DEVICE = "device"
TAG_SWEEP_ID = "sweep_id"
TAG_JOB = "job"
TAG_OUTCOME = "outcome"
TAG_GIT_COMMIT = "git_commit"
TAG_GIT_DIRTY = "git_dirty"
TAG_GIT_DIFF_SHA256 = "git_diff_sha256"
TAG_DATA_SHA256 = "data_sha256"

ARTIFACT_CONFIG = "config/config.yaml"  # the resolved config: the config of the rerun
ARTIFACT_OVERRIDES = "config/overrides.yaml"
ARTIFACT_ENVIRONMENT = "environment.json"
ARTIFACT_EPOCHS = "epochs.json"

# --- what the rerun adds to its own run ------------------------------------------------------------
TAG_RERUN_OF = "rerun_of"
TAG_RERUN_DIFFERS = "rerun_differs"
TAG_RERUN_DATA_MATCH = "rerun_data_match"
TAG_RERUN_NONCE = "rerun_nonce"  # finds the new run again after training
TAG_RERUN_LOSSES_IDENTICAL = "rerun_losses_identical"
TAG_RERUN_LOSS_MAX_ABS_DIFF = "rerun_loss_max_abs_diff"
TAG_RERUN_OF_HYDRA = "rerun_of_hydra"  # on a run of Hydra's --experimental-rerun

ARTIFACT_RERUN_DIFF = "rerun_diff.json"
ARTIFACT_RERUN_LOSSES = "rerun_losses.json"

# --- series of epochs.json that measure speed, memory or the machine, not the training trajectory -----
TIMING_SERIES = ("epoch_time_ms", "eval_time_ms", "samples_per_s", "peak_vram_mb", "peak_host_mb",
                 "peak_vram_reserved_mb", "gpu_power_w", "gpu_util_pct", "gpu_clock_mhz", "gpu_temp_c",
                 "contaminated")
#: Name patterns of the other measurement series: rates, times, the machine's load (measure/load.py), the GPU.
TIMING_PREFIXES, TIMING_SUFFIXES = ("cpu_", "gpu_", "peak_"), ("_per_s", "_ms", "_pct")
