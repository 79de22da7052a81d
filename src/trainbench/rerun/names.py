"""The run contract's names that a rerun reads and writes: tags, artifacts and per-epoch series.

Every other module of the package takes these strings from here, so that the whole vocabulary of
reruns is in one place (and ``docs/run-contract.md`` lists the same names).
"""

from __future__ import annotations

from trainbench.core.vocab import Artifact, DataInfo, Series, Tag, data_tag

# --- what the original training run carries --------------------------------------------------------
TAG_KIND = "kind"
KIND_TRAIN = "train"  # the value of TAG_KIND on a run made by run.py (analysis runs have another)
TAG_MODEL = "model"
TAG_DEVICE = "device"
TAG_SWEEP_ID = Tag.SWEEP_ID
TAG_JOB = "job"
TAG_OUTCOME = "outcome"
TAG_GIT_COMMIT = Tag.GIT_COMMIT
TAG_GIT_DIRTY = Tag.GIT_DIRTY
TAG_GIT_DIFF_SHA256 = Tag.GIT_DIFF_SHA256
TAG_DATA_SHA256 = data_tag(DataInfo.SHA256)

ARTIFACT_CONFIG = Artifact.CONFIG  # the resolved config: the config of the rerun
ARTIFACT_OVERRIDES = Artifact.OVERRIDES
ARTIFACT_ENVIRONMENT = Artifact.ENVIRONMENT
ARTIFACT_EPOCHS = Artifact.EPOCHS

# --- what the rerun adds to its own run ------------------------------------------------------------
TAG_RERUN_OF = Tag.RERUN_OF
TAG_RERUN_DIFFERS = Tag.RERUN_DIFFERS
TAG_RERUN_DATA_MATCH = Tag.RERUN_DATA_MATCH
TAG_RERUN_NONCE = Tag.RERUN_NONCE  # finds the new run again after training
TAG_RERUN_LOSSES_IDENTICAL = Tag.RERUN_LOSSES_IDENTICAL
TAG_RERUN_LOSS_MAX_ABS_DIFF = Tag.RERUN_LOSS_MAX_ABS_DIFF
TAG_RERUN_OF_HYDRA = Tag.RERUN_OF_HYDRA  # on a run of Hydra's --experimental-rerun

#: The command-line key that confirms a logged ``model.spec`` no installed model declares (rerun/trust.py).
ALLOW_SPEC_KEY = "rerun_allow_spec"

ARTIFACT_RERUN_DIFF = Artifact.RERUN_DIFF
ARTIFACT_RERUN_LOSSES = Artifact.RERUN_LOSSES

# --- series of epochs.json that measure speed, memory or the machine, not the training trajectory -----
TIMING_SERIES = (Series.EPOCH_TIME_MS, Series.EVAL_TIME_MS, Series.SAMPLES_PER_S, Series.PEAK_VRAM_MB, Series.PEAK_HOST_MB,
                 Series.PEAK_VRAM_RESERVED_MB, Series.GPU_POWER_W, "gpu_util_pct", "gpu_clock_mhz", Series.GPU_TEMP_C,
                 "contaminated")
#: Name patterns of the other measurement series: rates, times, the machine's load (measure/load.py), the GPU.
TIMING_PREFIXES, TIMING_SUFFIXES = ("cpu_", "gpu_", "peak_"), ("_per_s", "_ms", "_pct")
