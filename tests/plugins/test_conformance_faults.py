"""The conformance check sees host reads that are not ``.item()`` in the model's own file (issue 31): a copy to
the host written ``.to("cpu")``, ``np.asarray``, an f-string of a tensor, ``.item()`` in a helper module, mask
indexing. On a CPU none of them is a transfer; the check finds them by the ops the host has to wait for."""

from __future__ import annotations

import dataclasses
import importlib
import sys

import numpy as np
import pytest

from trainbench.conformance import run_checks

BARS = 1200


def _variant(name: str, trainable: type):
    from lstm_forecaster.model import SPEC

    return dataclasses.replace(SPEC, name=name, build=lambda cfg, data, ctx: trainable(cfg, data, ctx))


def _sync_check(spec):
    return next(r for r in run_checks(spec, size="tiny", bars=BARS) if r.name == "no host sync")


@pytest.fixture
def base(example_on_path):
    from lstm_forecaster.model import LSTMForecasterTrainable

    return LSTMForecasterTrainable


@pytest.fixture
def helper_module(tmp_path, monkeypatch):
    """A module of the user's own, outside the model's package, that reads a tensor on the host."""
    (tmp_path / "tb_logging_helper.py").write_text("def log_loss(t):\n    return round(t.item(), 4)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("tb_logging_helper")
    sys.modules.pop("tb_logging_helper", None)


READS = {
    "to-cpu": (lambda t, helper: t.detach().to("cpu"), 'Tensor.to("cpu")'),
    "np-asarray": (lambda t, helper: np.asarray(t.detach()), "Tensor.__array__"),
    "f-string": (lambda t, helper: f"{t:.4f}", "aten._local_scalar_dense"),
    "helper-item": (lambda t, helper: helper.log_loss(t), "tb_logging_helper.py:2"),
    "mask-index": (lambda t, helper: t.detach().reshape(1)[t.detach().reshape(1) > 0], "boolean-mask indexing"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(READS))
def test_host_reads_other_than_item_fail_the_check(base, helper_module, case):
    read, expected = READS[case]

    class Reading(base):
        def optimizer_step(self, idx):
            out = super().optimizer_step(idx)
            self.last = read(out["loss"], helper_module)  # the host waits for the device every step
            return out

    check = _sync_check(_variant(f"reading_{case.replace('-', '_')}", Reading))
    assert not check.ok, check.detail
    assert expected in check.detail, check.detail


def test_the_example_itself_still_passes(base):
    check = _sync_check(_variant("clean", base))
    assert check.ok, check.detail
