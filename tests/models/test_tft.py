"""Temporal Fusion Transformer: loss, shapes, causality, selection weights, learning, artifacts, refusals."""

from __future__ import annotations

import csv
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers.models import model_config
from trainbench.core.errors import ConfigError, ModelDataError
from trainbench.core.vocab import ParamKey, Series
from trainbench.data.features import KNOWN_NAMES
from trainbench.data.in_memory import make_market_data
from trainbench.models.base import BuildContext, clip_and_step
from trainbench.models.registry import REGISTRY
from trainbench.models.tft import TFTConfig, TFTTrainable, build, pinball_loss

CPU = BuildContext(device=torch.device("cpu"))


def tiny(*overrides: str) -> TFTConfig:
    """TFT at its `tiny` size with three horizons (1, 3, 5) and batches of 16."""
    return model_config("tft", "model.horizons=[1,3,5]", "model.batch_size=16", *overrides)


@pytest.fixture(scope="module")
def data():
    return make_market_data(n=400, n_instruments=2)


@pytest.fixture
def model(data) -> TFTTrainable:
    return build(tiny(), data, CPU)


def test_pinball_loss_matches_direct_formula() -> None:
    g = torch.Generator().manual_seed(1)
    pred, target = torch.randn(7, 3, 4, generator=g), torch.randn(7, 3, generator=g)
    qs = [0.05, 0.3, 0.5, 0.9]
    got = pinball_loss(pred, target, torch.tensor(qs))
    for h in range(3):
        total = 0.0
        for b in range(7):
            for j, q in enumerate(qs):
                e = float(target[b, h] - pred[b, h, j])
                total += q * e if e >= 0 else (q - 1) * e
        assert got[h].item() == pytest.approx(total / 7, rel=1e-5)


def test_output_shapes(model: TFTTrainable) -> None:
    starts = model.train_starts[:5]
    out = model.module(*model.batch(starts))
    L, D, Q = 12, 5, 3
    assert out.quantiles.shape == (5, 3, Q)  # (batch, horizons, quantiles)
    assert out.steps.shape == (5, D, Q)
    assert torch.equal(out.quantiles, out.steps[:, [0, 2, 4]])  # horizons 1, 3, 5 -> steps 0, 2, 4
    assert out.encoder_weights.shape == (5, L, len(model.encoder_vars))
    assert out.decoder_weights.shape == (5, D, len(KNOWN_NAMES))
    assert out.attention.shape == (5, D, L + D)
    # the encoder reads every feature column once, the decoder only the known ones
    assert sorted(model.encoder_vars) == sorted(model.fs.names)
    assert model.decoder_vars == list(KNOWN_NAMES)


def test_targets_are_scaled_cumulative_returns(model: TFTTrainable) -> None:
    k = 7
    s = int(model.train_starts[k])
    r, sd = model.fs.returns, model.fs.return_std
    for j, h in enumerate([1, 3, 5]):
        expected = float(r[s + 12: s + 12 + h].double().sum()) / (sd * math.sqrt(h))
        assert model.train_targets[k, j].item() == pytest.approx(expected, rel=1e-4, abs=1e-6)


def _decoder_steps(model: TFTTrainable, perturb_step: int) -> tuple[torch.Tensor, torch.Tensor]:
    model.module.eval()
    observed, known, static = model.batch(model.train_starts[:6])
    bumped = known.clone()
    bumped[:, 12 + perturb_step] += 3.0  # a later decoder step's known inputs
    with torch.no_grad():
        return model.module(observed, known, static).steps, model.module(observed, bumped, static).steps


def test_attention_is_causal(model: TFTTrainable) -> None:
    k = 2
    base, bumped = _decoder_steps(model, k)
    assert torch.allclose(base[:, :k], bumped[:, :k], atol=0, rtol=0)  # earlier steps untouched
    assert not torch.allclose(base[:, k:], bumped[:, k:])  # the perturbation does reach step k on


def test_causality_check_detects_a_leak(model: TFTTrainable) -> None:
    model.module.causal_mask.zero_()  # no mask: earlier queries may now attend to later steps
    base, bumped = _decoder_steps(model, 2)
    assert not torch.allclose(base[:, :2], bumped[:, :2])


def test_selection_and_attention_weights_are_distributions(model: TFTTrainable) -> None:
    model.module.eval()
    with torch.no_grad():
        out = model.module(*model.batch(model.train_starts[:9]))
    for w in (out.static_weights, out.encoder_weights, out.decoder_weights, out.attention):
        assert (w >= 0).all()
        torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))
    assert (out.attention[:, 0, 13:] == 0).all()  # decoder step 0 (position 12) sees nothing later


def test_one_step_lowers_the_loss_on_a_fixed_batch(data) -> None:
    m = build(tiny("model.dropout=0.0", "model.lr=3e-3"), data, CPU)
    idx = torch.arange(32)
    starts, targets = m.train_starts[idx], m.train_targets[idx]
    m.module.train()
    before, _ = m.loss_on(starts, targets)
    before.backward()
    clip_and_step(m.module, m.optimizer, m.cfg.max_grad_norm)
    with torch.no_grad():
        after, _ = m.loss_on(starts, targets)
    assert after.item() < before.item()


def test_train_epoch_returns_device_scalars(model: TFTTrainable) -> None:
    out = model.train_epoch()
    assert {"loss", Series.GRAD_NORM, "loss_h1", "loss_h3", "loss_h5"} <= set(out)
    for v in out.values():
        assert isinstance(v, torch.Tensor) and v.ndim == 0 and torch.isfinite(v)
    assert model.samples_per_epoch == (model.n_train_windows // 16) * 16 > 0
    torch.testing.assert_close(out["loss"], (out["loss_h1"] + out["loss_h3"] + out["loss_h5"]) / 3)
    assert model.inference(4)().shape == (4, 3, 3)
    assert model.info()["num_params"] > 0


def test_write_artifacts(model: TFTTrainable, tmp_path: Path) -> None:
    paths = model.write_artifacts(tmp_path)
    names = {p.name for p in paths}
    assert {"tft_variable_importance.csv", "tft_variable_importance.png", "tft_attention.csv"} == names
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    assert (tmp_path / "tft_variable_importance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with (tmp_path / "tft_variable_importance.csv").open() as f:
        rows = list(csv.DictReader(f))
    groups = {g: {r["variable"]: float(r["importance"]) for r in rows if r["group"] == g}
              for g in ("static", "encoder", "decoder")}
    assert set(groups["encoder"]) == set(model.fs.names)
    assert set(groups["decoder"]) == set(KNOWN_NAMES)
    assert groups["static"] == {"instrument": pytest.approx(1.0)}
    for g in groups.values():
        assert sum(g.values()) == pytest.approx(1.0, abs=1e-4)
    assert rows[0]["split"] == "val"  # computed on held-out windows
    with (tmp_path / "tft_attention.csv").open() as f:
        att = list(csv.DictReader(f))
    assert len(att) == 12 + 5 and sum(float(r["h1"]) for r in att) == pytest.approx(1.0, abs=1e-4)


def test_importances_do_not_depend_on_chunking(model: TFTTrainable) -> None:
    whole, parts = model.importances(chunk=1000), model.importances(chunk=5)
    for group in ("encoder", "decoder", "static"):
        assert whole[group] == pytest.approx(parts[group], abs=1e-6)
    assert whole["attention"][5] == pytest.approx(parts["attention"][5], abs=1e-6)
    assert whole["windows"] == 32


def test_build_refuses_too_few_bars() -> None:
    small = make_market_data(n=100)  # two 50-bar sessions: no 32 + 30 bar window fits
    with pytest.raises(ModelDataError, match=r"training windows.*62 consecutive bars.*giving 0"):
        build(TFTConfig(), small, CPU)


def test_build_refuses_bad_config(data) -> None:
    with pytest.raises(ConfigError, match="model.hidden=10 is not divisible by model.heads=4"):
        build(replace(tiny(), hidden=10, heads=4), data, CPU)  # refused by build too (a config made in code)
    with pytest.raises(ConfigError, match="model.quantiles"):
        build(replace(tiny(), quantiles=[0.5, 1.0]), data, CPU)
    with pytest.raises(ConfigError, match=ParamKey.BATCH_SIZE):
        build(tiny("model.batch_size=auto"), data, CPU)


def test_registered_and_small_is_the_schema() -> None:
    """The schema's defaults are the `small` size (the composed config equals them: tests/test_sizes.py)."""
    assert "tft" in REGISTRY and REGISTRY.get("tft").config_cls is TFTConfig
    cfg = TFTConfig()
    assert cfg.name == "tft" and cfg.size == "small" and cfg.target_epochs == 1500 and cfg.horizons == [1, 5, 15, 30]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_trains_on_cuda_without_host_syncs() -> None:
    d = make_market_data(n=400, device="cuda")
    m = build(tiny(), d, BuildContext(device=torch.device("cuda"), precision="bf16"))
    m.train_epoch()  # first epoch: lazy cuDNN/cuBLAS set-up may synchronise
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host-device sync inside the epoch raises
    try:
        out = m.train_epoch()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out["loss"].device.type == "cuda" and torch.isfinite(out["loss"]).item()


# ------------------------------------------------------------------------------------ attention span


def test_attention_span_all_gives_the_same_forecasts_as_decoder_only(data) -> None:
    # Google's span (every step queries) and pytorch-forecasting's (decoder steps only) differ in work,
    # not in the forecasts: the mask is causal and the layers after the attention act per step.
    a = build(tiny("model.attention_span=decoder"), data, CPU)
    b = build(tiny("model.attention_span=all"), data, CPU)
    b.module.load_state_dict(a.module.state_dict())
    assert b.module.causal_mask.shape == (12 + 5, 12 + 5) and a.module.causal_mask.shape == (5, 12 + 5)
    a.module.eval()
    b.module.eval()
    inputs = a.batch(a.train_starts[:6])
    with torch.no_grad():
        oa, ob = a.module(*inputs), b.module(*inputs)
    torch.testing.assert_close(ob.steps, oa.steps, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ob.attention, oa.attention, atol=1e-6, rtol=1e-5)  # decoder rows, (B, D, L+D)


def test_attention_span_all_is_causal_for_every_query(data) -> None:
    m = build(tiny("model.attention_span=all"), data, CPU)
    mask = m.module.causal_mask  # True where a query may not look: exactly the strict upper triangle
    assert torch.equal(mask, torch.ones(17, 17, dtype=torch.bool).triu(1))
    base, bumped = _decoder_steps(m, 2)
    assert torch.equal(base[:, :2], bumped[:, :2])  # earlier decoder steps untouched
    assert not torch.allclose(base[:, 2:], bumped[:, 2:])
    m.module.causal_mask.zero_()  # the same check catches a leak in this span too
    base, bumped = _decoder_steps(m, 2)
    assert not torch.allclose(base[:, :2], bumped[:, :2])


def test_attention_span_is_validated_and_recorded(data) -> None:
    with pytest.raises(ConfigError, match="model.attention_span='encoder'"):
        build(replace(tiny(), attention_span="encoder"), data, CPU)
    assert build(tiny("model.attention_span=all"), data, CPU).info()["attention_span"] == "all"


# ----------------------------------------------------------------- structure (following the references)


def test_interpolation_norm_by_hand() -> None:
    from trainbench.models.tft_layers import InterpolationNorm

    # 5 points resampled to 3 with aligned ends sample positions 0, 2, 4: (0, 2, 4); the gate starts at
    # 2 sigmoid(0) = 1; LayerNorm of (0, 2, 4): mean 2, population std sqrt(8/3) -> (-1.2247, 0, 1.2247)
    out = InterpolationNorm(5, 3)(torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0]]))
    torch.testing.assert_close(out, torch.tensor([[-1.2247357, 0.0, 1.2247357]]), atol=1e-4, rtol=0)


def test_selection_weights_compact_follows_pytorch_forecasting_and_full_google(data) -> None:
    from trainbench.models.tft_layers import GatedResidualNetwork, InterpolationNorm

    compact = build(tiny("model.hidden=16"), data, CPU).module
    full = build(tiny("model.hidden=16", "model.selection_weights=full"), data, CPU).module
    v = compact.encoder_vsn.n_vars
    assert v == 10 and compact.encoder_vsn.weights_grn.fc1.out_features == min(16, v)  # min(hidden, V)
    assert isinstance(compact.encoder_vsn.weights_grn.skip, InterpolationNorm)
    assert full.encoder_vsn.weights_grn.fc1.out_features == 16  # hidden
    assert isinstance(full.encoder_vsn.weights_grn.skip, torch.nn.Linear)
    # one static variable: a gate and a norm, no selection network; its weight is exactly 1
    assert not any(isinstance(m, GatedResidualNetwork) for m in compact.static_vsn.modules())
    # the known inputs have one embedding, used by encoder and decoder steps alike
    assert not hasattr(compact, "decoder_embed") and not hasattr(compact, "encoder_embed")
    with pytest.raises(ConfigError, match="model.selection_weights"):
        build(replace(tiny(), selection_weights="wide"), data, CPU)


def test_known_inputs_share_one_embedding_across_encoder_and_decoder(model: TFTTrainable) -> None:
    # bumping the known embedding's weight for one variable changes what the encoder and the decoder see
    m = model.module.eval()
    inputs = model.batch(model.train_starts[:4])
    with torch.no_grad():
        before = m(*inputs)
        m.known_embed.weight[0] += 1.0
        after = m(*inputs)
    assert not torch.allclose(before.encoder_weights, after.encoder_weights)
    assert not torch.allclose(before.decoder_weights, after.decoder_weights)


def test_google_volatility_size_parameter_count() -> None:
    from trainbench.models.tft import TemporalFusionTransformer

    def count(**kw) -> int:
        net = TemporalFusionTransformer(n_observed=6, n_known=4, n_static_categories=1, encoder_len=252,
                                        horizons=[1, 2, 3, 4, 5], n_quantiles=3, hidden=160, heads=1, **kw)
        return sum(p.numel() for p in net.parameters())

    # pytorch-forecasting's TFT at this size has 2.79 M parameters; this structure matches it
    assert 2_700_000 < count() < 2_800_000
    # Google's code's selection-weight networks: (V*d) -> d -> V with a linear skip instead
    assert count(selection_weights="full") - count() > 300_000
