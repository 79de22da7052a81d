"""The conformance check fails a model that would time dishonestly, naming the check and the fix.

Each bad model is the example LSTM forecaster with one fault; the example itself passes (its own tests,
examples/lstm_forecaster/tests, run in this suite too)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from trainbench.conformance import assert_conforms, main, run_checks
from trainbench.core.errors import ConformanceError

BARS = 1200  # the example at its `tiny` size (SPEC.sizes) on this many bars


def _variant(name: str, trainable: type):
    from lstm_forecaster.model import SPEC

    return dataclasses.replace(SPEC, name=name, build=lambda cfg, data, ctx: trainable(cfg, data, ctx))


def _failed(spec) -> dict[str, str]:
    return {r.name: r.detail + " | fix: " + r.fix
            for r in run_checks(spec, size="tiny", bars=BARS) if not r.ok}


@pytest.fixture
def base(example_on_path):
    from lstm_forecaster.model import LSTMForecasterTrainable

    return LSTMForecasterTrainable


def test_a_host_sync_inside_the_epoch_fails_the_check(base):
    class Syncing(base):
        def optimizer_step(self, idx):
            out = super().optimizer_step(idx)
            self.last_loss = out["loss"].item()  # waits for the device every step
            return out

    with pytest.raises(ConformanceError) as info:
        assert_conforms(_variant("syncing", Syncing), size="tiny", bars=BARS)
    msg = str(info.value)
    assert "FAIL  no host sync" in msg and "test_conformance.py" in msg and "Tensor.item" in msg
    assert "fix: keep every value on the device" in msg
    assert "FAIL  memory" in msg  # memory_step runs the same step
    assert "7 of 9 checks passed" in msg


def test_an_epoch_whose_work_changes_fails_fixed_work(base):
    class Growing(base):
        def train_epoch(self):
            self.epochs = getattr(self, "epochs", 0) + 1
            out = super().train_epoch()
            for _ in range(self.epochs % 2):  # an extra step every other epoch
                self.optimizer_step(self.train_starts.new_zeros(self.batch_size))
            return out

    failed = _failed(_variant("growing", Growing))
    assert list(failed) == ["fixed work"], failed
    assert "optimiser steps" in failed["fixed work"] and "fixed number of steps" in failed["fixed work"]


def test_python_floats_and_a_missing_grad_norm_fail_outputs(base):
    class Floats(base):
        def train_epoch(self):
            return {"loss": super().train_epoch()["loss"].detach().mean().tolist()}

    failed = _failed(_variant("floats", Floats))
    assert "outputs" in failed
    assert "no 'grad_norm'" in failed["outputs"] and "loss is a float" in failed["outputs"]


def test_an_unseeded_sampler_fails_determinism(base):
    class Unseeded(base):
        def __init__(self, cfg, data, ctx):
            super().__init__(cfg, data, ctx)
            self.generator = torch.Generator(device=ctx.device)
            self.generator.seed()  # from the OS, not from ctx.seed

    failed = _failed(_variant("unseeded", Unseeded))
    assert list(failed) == ["determinism"], failed
    assert "ctx.generator()" in failed["determinism"]


def test_a_model_without_memory_step_fails_memory(base):
    class NoMemory(base):
        memory_step = None

    failed = _failed(_variant("nomemory", NoMemory))
    assert list(failed) == ["memory"], failed
    assert "batch_limit" in failed["memory"]


def test_the_command_line_exit_codes(base, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the current directory is importable, as with `python -m`
    (tmp_path / "syncing_model.py").write_text(
        "import dataclasses\nfrom lstm_forecaster.model import SPEC as _S, LSTMForecasterTrainable as _T\n"
        "class Syncing(_T):\n"
        "    def train_epoch(self):\n"
        "        out = super().train_epoch()\n"
        "        if out['loss'] > 1e9:\n"  # Tensor.__bool__: a host read
        "            raise RuntimeError\n"
        "        return out\n"
        "SPEC = dataclasses.replace(_S, name='syncing_cli', build=lambda c, d, x: Syncing(c, d, x))\n")
    sets = ["--size=tiny", f"--bars={BARS}"]
    assert main(["syncing_model:SPEC", *sets]) == 1
    out = capsys.readouterr().out
    assert "FAIL  no host sync" in out and "Tensor.__bool__" in out and "checks passed" in out
    assert main(["no_such_module:SPEC"]) == 2
    assert main(["syncing_model:SPEC", "--set=no_such_key=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 2 and "no_such_module" in err and "no_such_key" in err


def test_the_determinism_check_seeds_like_a_run_and_leaves_the_process_as_it_was(base, monkeypatch):
    """It uses the run's own seed_everything (deterministic algorithms, cuDNN flags, cuBLAS workspace) and
    restores every one of them afterwards: a model checked in a test session does not change later tests."""
    import os

    import trainbench.conformance as check
    from trainbench.models import runtime

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    seen = []
    monkeypatch.setattr(check, "seed_everything",
                        lambda seed, det: (seen.append(det), runtime.seed_everything(seed, det))[1])
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
              torch.backends.cudnn.deterministic)
    assert _failed(_variant("seeded", base)) == {}
    assert True in seen
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
            torch.backends.cudnn.deterministic) == before
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
