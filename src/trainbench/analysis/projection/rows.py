"""The shapes a ``projections[]`` row takes while the projection stage assembles it.

A row is built in steps by several modules (projection.py's measured and projected rows, host_floor.attach's floor on
the local card, data_parallel.dp_row's row across N GPUs), so until it is complete it is a dict: this TypedDict names
its keys, the fields of analysis/report_types.py's ``ProjectionRow``, which projection.project_report turns it into
once, at the end of the stage.
"""

from __future__ import annotations

from typing import TypedDict


class MicroBatchFit(TypedDict):
    """roofline.fitting_micro_batch: the largest micro-batch that fits a GPU and the accumulation that keeps the
    optimiser batch (``ProjectionRow.fits_with``)."""

    micro_batch: int
    grad_accum: int | None
    fixed_mb: float
    per_sample_mb: float
    batch: int


class FloorFigures(TypedDict):
    """host_floor.host_floor: the local card's epoch floored by this host (``ProjectionRow.host_floor``)."""

    cpu_epoch_ms: float
    ops: float
    dispatch_us_per_op: float
    dispatch_from: str
    launch_us: list[float]
    floor_ms: float
    floor_ms_range: list[float]
    gpu_epoch_ms: float
    gpu_epoch_ms_range: list[float]
    speedup: float
    speedup_range: list[float]
    gpu_faster: bool | None


class ProjectionDraft(TypedDict, total=False):
    """A ``projections[]`` row being assembled (the keys of ``ProjectionRow``)."""

    instance: str
    gpu: str
    gpus: int
    model: str
    epoch_ms: float | None
    epoch_ms_range: list[float] | None
    hours: float | None
    hours_range: list[float] | None
    target_epochs: int | None
    method: str | None
    fits: bool | None
    memory_need_mb: float | None
    precision: str | None
    range_basis: str | None
    notes: list[str]
    gpu_name: str | None
    memory_source: str | None
    fits_with: MicroBatchFit | None
    data_parallel: int
    comm_ms: float | None
    comm_ms_range: list[float] | None
    global_batch: int | None
    host_floor: FloorFigures | None
