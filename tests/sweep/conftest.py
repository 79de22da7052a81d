"""A throw-away single-node SLURM cluster (tests/helpers/slurm_cluster.py), started once for the `slurm` tests;
a tracking store for the sweep's parent run and callbacks."""

from __future__ import annotations

import pytest

from helpers.slurm_cluster import SlurmCluster, slurm_available


@pytest.fixture(scope="session")
def slurm_cluster():
    reason = slurm_available()
    if reason:
        pytest.skip(f"no SLURM here: {reason}")
    cluster = SlurmCluster()
    try:
        cluster.start()
    except (OSError, RuntimeError) as e:  # installed but not startable here (a container without the rights)
        pytest.skip(f"SLURM could not be started here: {e}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def slurm_data_dir(tmp_path_factory):
    """One data folder for every job of the module: the synthetic debug file is generated once."""
    return tmp_path_factory.mktemp("slurm-data")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A new sqlite store and its experiment, one per test module."""
    from helpers.runs import scratch_store

    return scratch_store(tmp_path_factory.mktemp("sweep-store"))
