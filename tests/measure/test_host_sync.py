"""The host-sync guard: a read of a tensor on the host from trainbench's own code raises, others do not."""

from __future__ import annotations

import pytest
import torch

from trainbench.measure.harness import read_scalars
from trainbench.measure.host_sync import HostSyncError, forbid_host_syncs


def test_host_sync_guard_catches_a_read_from_trainbench_code_only():
    t = torch.ones(3)
    with forbid_host_syncs():
        assert t.sum().item() == 3.0  # a test's own read is not the model's
        with pytest.raises(HostSyncError, match="harness.py"):
            read_scalars({"loss": t.sum()})  # trainbench code calling .tolist()
    with forbid_host_syncs(raise_on_sync=False) as found:
        read_scalars({"loss": t.sum()})
        read_scalars({"loss": t.mean()})
    assert len(found) == 2 and all("tolist" in f for f in found)
    assert read_scalars({"loss": t.sum()}) == {"loss": 3.0}  # methods restored after the block
