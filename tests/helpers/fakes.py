"""A fake trainable for the epoch loop: no model, known losses, a failure on request."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trainbench.core.vocab import Series


class FakeTrainable:
    """Epochs whose ``loss`` cycles through ``losses`` (with ``grad_norm`` 1 and a ``loss_part`` 2); epoch
    ``raise_at`` raises ``exc`` instead. ``with_eval``: it also has a validation pass (``val_loss`` 0.5),
    counted in ``evals``. ``inference`` runs a small linear layer."""

    samples_per_epoch = 100
    batch_size = 10

    def __init__(self, losses: Sequence[float] = (1.0,), raise_at: int | None = None,
                 exc: BaseException | None = None, with_eval: bool = False) -> None:
        self.losses = list(losses)
        self.raise_at = raise_at
        self.exc = exc
        self.epoch = 0
        self.evals = 0
        self.module = torch.nn.Linear(2, 1)
        if with_eval:
            self.eval_epoch = self._eval

    def train_epoch(self) -> dict[str, torch.Tensor]:
        if self.epoch == self.raise_at:
            assert self.exc is not None
            raise self.exc
        loss = self.losses[self.epoch % len(self.losses)]
        self.epoch += 1
        return {"loss": torch.tensor(loss), Series.GRAD_NORM: torch.tensor(1.0), "loss_part": torch.tensor(2.0)}

    def _eval(self) -> dict[str, torch.Tensor]:
        self.evals += 1
        return {Series.VAL_LOSS: torch.tensor(0.5)}

    def inference(self, batch_size: int):
        x = torch.randn(batch_size, 2)
        return lambda: self.module(x)
