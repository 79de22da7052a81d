"""The JSON and CSV shapes the projection reads and writes, as TypedDicts.

Two artifacts cross the projection's edge as JSON: a run's workload profile (``workload_profile.json``,
schema 1, written by measure/workload.py and described there and in docs/projection.md) and the calibration's
``calibration_data/constants.json`` (written by scripts/calibrate_projection.py from analysis/projection/
calibration.py's fits). They stay dicts (they are read with ``json.load`` and written with ``json.dump``); these
types name their keys. The per-kernel tables of ``calibration_data/`` are read as rows of :class:`KernelRow`
and :class:`RnnRow`. Typing only: nothing here is checked at run time.
"""

from __future__ import annotations

from typing import TypedDict

# --------------------------------------------------------------------------------------------------
# the workload profile (schema 1)
# --------------------------------------------------------------------------------------------------


class KernelGroup(TypedDict):
    """Kernels of one class, dtype, autocast behaviour and size bucket: ``flops`` and ``bytes`` are the group's
    totals over ``count`` kernels."""

    cls: str
    dtype: str
    autocast: str
    count: float
    flops: float
    bytes: float


class Chain(TypedDict):
    """A recurrent layer's dependent time steps: ``count`` chains of ``steps`` steps of the per-step work."""

    what: str
    cls: str
    dtype: str
    autocast: str
    count: float
    steps: float
    flops_per_step: float
    bytes_per_step: float


class _HostRequired(TypedDict):
    ops: float
    syncs: float


class ProfileHost(_HostRequired, total=False):
    """The host's part of an epoch: eager kernel-launching ops, host syncs and (newer runs) the dispatch measured
    per op on the run's CPU."""

    dispatch_us_per_op: float


class OptimizerBooking(TypedDict):
    measured_impl: str | None
    booked_as: str | None


class WorkloadProfile(TypedDict, total=False):
    """``workload_profile.json``, schema 1 (measure/workload.py); ``coarse`` marks a profile rebuilt from a run's
    old aggregate ``workload.*`` metrics (kernel_model.profile_from_aggregate)."""

    schema: int
    profiled_on: str
    precision: str
    complete: bool
    incomplete_reasons: list[str]
    optimizer: OptimizerBooking
    kernels: list[KernelGroup]
    chains: list[Chain]
    host: ProfileHost
    coarse: bool


# --------------------------------------------------------------------------------------------------
# the calibration tables and the devices they were measured on
# --------------------------------------------------------------------------------------------------


class KernelRow(TypedDict):
    """One measured kernel of a per-kernel table (kernels.csv.gz, the tensor GEMM tables)."""

    gpu: str
    op: str
    dtype: str
    shape: str
    flops: float
    bytes: float
    ms: float


class RnnRow(TypedDict):
    """One cuDNN RNN layer of deepbench_rnn.csv.gz (numbers as floats); the per-pass columns are read by name
    (``f"{pass}_ms"``, ``f"{pass}_flops_per_step"``)."""

    gpu: str
    cell: str
    dtype: str
    hidden: float
    batch: float
    steps: float
    forward_ms: float
    backward_data_ms: float
    backward_weights_ms: float
    forward_flops_per_step: float
    forward_bytes_per_step: float
    backward_flops_per_step: float
    backward_bytes_per_step: float


class MeasuredDevice(TypedDict, total=False):
    """A GPU a calibration table measured (catalogue.measured_devices, tensor_measured_devices): its datasheet
    peaks (TFLOP/s by dtype) and bandwidth, and where a curve it lacks comes from (``mem_from`` for the fp32
    fit, ``memory_from`` for the tensor fit)."""

    entry: str
    peak_tflops: dict[str, float]
    memory_gbps: float
    datasheet: str | None
    source: str
    mem_from: str
    memory_from: str


# --------------------------------------------------------------------------------------------------
# constants.json
# --------------------------------------------------------------------------------------------------


class ChainStep(TypedDict):
    """One dependent step's constants: latency floor (ms), bandwidth fraction, peak fraction by unit."""

    floor_ms: float
    beff: float
    eff: dict[str, float]


class ChainFit(TypedDict):
    """One pass's chain fit (calibration.fit_chains): floors per cell, fractions, and its errors."""

    floor_ms: dict[str, float]
    beff: float
    eff: dict[str, float]
    measured_as: str
    train_rows: int
    held_out_rows: int
    held_out: dict[str, float]
    fit_error: dict[str, float]


class ChainCalibration(TypedDict, total=False):
    """constants.json's ``chains``: the two passes' fits and where they come from."""

    forward: ChainFit
    backward: ChainFit
    gpu: str
    entry: str
    memory_gbps: float
    peaks: dict[str, float]
    widen: list[float]
    widen_why: str
    rule: str
    source: str
    commit: str
    table: str


class GpuClasses(TypedDict):
    """A fitted GPU's curves: the memory curve and the fp32 matmul curve (the keys of calibration.fit_memory and
    fit_compute)."""

    elementwise_norm: dict[str, float]
    matmul_attention: dict[str, dict[str, float]]


class GpuFit(TypedDict):
    """constants.json's ``gpus[<table gpu>]`` (calibration.calibrate)."""

    peak_tflops: dict[str, float]
    memory_gbps: float
    datasheet: str | None
    classes: GpuClasses
    held_out: dict[str, dict[str, float]]
    notes: list[str]
    train_rows: int
    held_out_rows: int
    smallest: dict[str, float | None]


class _TensorFitRequired(TypedDict):
    curve: dict[str, float]
    peak_tflops: float
    memory_gbps: float
    held_out: dict[str, float]
    fit_error: dict[str, float]
    train_rows: int
    held_out_rows: int
    smallest: dict[str, float]


class TensorFit(_TensorFitRequired, total=False):
    """constants.json's ``tensor_core.gpus[<gpu>][<dtype>]`` (calibration.calibrate_tensor); ``transfer_held_out``:
    the error of another dtype's or GPU's curve moved here ({"from <source>": summary, with quantiles across
    GPUs})."""

    transfer_held_out: dict[str, dict[str, float | list[float]]]


class TensorCalibration(TypedDict, total=False):
    """How a catalogue entry's tensor-core curves are calibrated: the fitted GPU, its relation, the extra widening,
    a note; ``dtype``: the fitted dtype where another stands in; ``by_dtype``: a dtype calibrated elsewhere."""

    gpu: str | None
    relation: str
    widen: list[float]
    note: str
    dtype: str
    by_dtype: dict[str, TensorCalibration]


class CatalogueCalibration(TypedDict, total=False):
    """constants.json's ``catalogue[<entry>]``: the measured GPU a catalogue entry takes its curves from."""

    gpu: str
    relation: str
    widen: list[float]
    note: str
    tensor: TensorCalibration


class TensorCoreConstants(TypedDict, total=False):
    """constants.json's ``tensor_core``: the fits per GPU and dtype, the devices they were measured on, the transfer
    rule and its sources."""

    gpus: dict[str, dict[str, TensorFit]]
    devices: dict[str, MeasuredDevice]
    default_gpu: str
    rule: str
    fp16: str
    source: dict[str, str]
    sources: list[dict[str, str]]
    table: str
    tables: list[str]
    tf32_rule: str
    tf32_rule_widen: list[float]
    transfer_tests: list[str]
    transfer_widen: list[float]


class Uncalibrated(TypedDict):
    """constants.json's ``uncalibrated``: default curves of a GPU without a calibration, and their widening."""

    e_max: float
    f_half: float
    k: float
    b_max: float
    b_half: float
    kb: float
    t_min_ms: float
    widen: list[float]


class Constants(TypedDict, total=False):
    """``calibration_data/constants.json`` (calibration.load_constants)."""

    schema: int
    source: dict[str, str]
    table: str
    split: str
    held_out_share: float
    range_percentiles: list[int]
    gpus: dict[str, GpuFit]
    catalogue: dict[str, CatalogueCalibration]
    uncalibrated: Uncalibrated
    tensor_core: TensorCoreConstants
    chains: ChainCalibration
    fp32_check: dict[str, dict[str, float | str]]
    a100_check: dict[str, dict[str, float] | float | str]


# --------------------------------------------------------------------------------------------------
# calibration_data/catalogue.yaml
# --------------------------------------------------------------------------------------------------


class CatalogueBoard(TypedDict, total=False):
    """A measured board of catalogue.yaml's ``measured`` or ``tensor_measured``: the ``conf/hardware`` entry it is
    (its figures read from there), or its own datasheet figures; the dtypes a tensor table measured; the board
    whose curve it borrows where it has none."""

    entry: str
    dtypes: list[str]
    datasheet: str
    peak_tflops: dict[str, float]
    memory_gbps: float
    mem_from: str
    memory_from: str
    source: str


class CatalogueEntryTensor(TypedDict, total=False):
    """catalogue.yaml's ``entries[<entry>].tensor``: the tensor-core relation, or the architecture with no public
    per-kernel data."""

    gpu: str
    relation: str
    arch: str


class CatalogueEntry(TypedDict, total=False):
    """catalogue.yaml's ``entries[<conf/hardware entry>]``."""

    gpu: str
    relation: str
    widen: list[float]
    note: str
    tensor: CatalogueEntryTensor


class CatalogueFile(TypedDict):
    """``calibration_data/catalogue.yaml`` (catalogue.load)."""

    measured: dict[str, CatalogueBoard]
    tensor_measured: dict[str, CatalogueBoard]
    tensor_default: str
    entries: dict[str, CatalogueEntry]
    uncalibrated: Uncalibrated
