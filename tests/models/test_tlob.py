"""TLOB: labels, book features, BiN, the network, training and build checks, and its Hydra config."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.data import TICK, book_data, random_book
from helpers.models import model_config
from trainbench import CONF_DIR
from trainbench.core.errors import ModelDataError
from trainbench.core.vocab import Series
from trainbench.data.market import MarketData
from trainbench.models.base import BuildContext
from trainbench.models.tlob import (
    DOWN,
    NO_LABEL,
    STATIONARY,
    TLOB,
    UP,
    BiN,
    TLOBBlock,
    TLOBConfig,
    book_features,
    build,
    fill_book,
    min_events,
    tlob_labels,
)

REPO = Path(__file__).resolve().parents[2]
CPU = BuildContext(device=torch.device("cpu"))


def tiny(*overrides: str) -> TLOBConfig:
    """TLOB at its `tiny` size with two dual-attention layers and batches of 16."""
    return model_config("tlob", "model.num_layers=2", "model.batch_size=16", *overrides)


# ---------------------------------------------------------------------------------------------- labels

#: Hand-made mid path. With horizon 2 and smooth 2 the smoothed mid (mean of 2, ending at t) is
#: t=1: 100, t=2: 101, t=3: 103, t=4: 104, t=5: 103, t=6: 101, t=7: 100, so pct(t) = s(t+2)/s(t) - 1 is
#: t=1: +3/100, t=2: +3/101, t=3: 0, t=4: -3/104, t=5: -3/103; t=0 and t=6, 7 have no label.
MID = np.array([100, 100, 102, 104, 104, 102, 100, 100], dtype=float)
PCT = np.array([3 / 100, 3 / 101, 0.0, -3 / 104, -3 / 103])


def test_labels_on_hand_made_path_with_paper_alpha() -> None:
    labels, alpha = tlob_labels(MID, horizon=2, smooth=2)
    assert alpha == pytest.approx(np.abs(PCT).mean() / 2)  # 0.0117675
    assert labels.tolist() == [NO_LABEL, UP, UP, STATIONARY, DOWN, DOWN, NO_LABEL, NO_LABEL]


def test_labels_with_a_given_alpha() -> None:
    # 0.029 sits between |pct| of t=4 (0.02885) and t=5 (0.02913), and below t=2 (0.02970)
    labels, alpha = tlob_labels(MID, horizon=2, smooth=2, alpha=0.029)
    assert alpha == 0.029
    assert labels.tolist() == [NO_LABEL, UP, UP, STATIONARY, STATIONARY, DOWN, NO_LABEL, NO_LABEL]


def test_label_smoothing_is_capped_at_the_horizon() -> None:
    a, _ = tlob_labels(MID, horizon=2, smooth=5, alpha=0.029)
    b, _ = tlob_labels(MID, horizon=2, smooth=2, alpha=0.029)
    assert a.tolist() == b.tolist()
    # without smoothing, pct(t) = mid(t+2)/mid(t) - 1: +2%, +4%, +1.96%, -1.92%, -3.85%, -1.96%
    c, _ = tlob_labels(MID, horizon=2, smooth=1, alpha=0.03)
    assert c.tolist() == [STATIONARY, UP, STATIONARY, STATIONARY, DOWN, STATIONARY, NO_LABEL, NO_LABEL]


def test_labels_skip_nan_mid_and_never_look_past_the_horizon() -> None:
    mid = MID.copy()
    mid[3] = np.nan  # in the averages ending at t=3 and t=4: t=1..4 lose their label
    labels, _ = tlob_labels(mid, horizon=2, smooth=2, alpha=0.029)
    assert labels.tolist() == [NO_LABEL] * 5 + [DOWN, NO_LABEL, NO_LABEL]
    later = MID.copy()
    later[7] = 1e6  # only labels whose future average reaches event 7 (t + 2 >= 7) may change
    a, _ = tlob_labels(MID, horizon=2, smooth=2, alpha=0.029)
    b, _ = tlob_labels(later, horizon=2, smooth=2, alpha=0.029)
    assert a[:5].tolist() == b[:5].tolist() and b[5] == UP


# -------------------------------------------------------------------------------------------- features


def test_fill_book_keeps_the_ladder_monotone() -> None:
    book = random_book(200, empty_frac=0.3)
    assert np.isnan(book.levels[:, :, 0]).any()
    filled = fill_book(book.levels, TICK)
    assert np.isfinite(filled).all()
    assert (np.diff(filled[:, :, 0], axis=1) > 0).all()  # asks rise with depth
    assert (np.diff(filled[:, :, 2], axis=1) < 0).all()  # bids fall with depth
    assert (filled[:, :, 1][np.isnan(book.levels[:, :, 0])] == 0).all()  # empty levels keep size 0


def test_book_features_are_finite_and_use_training_statistics_only() -> None:
    book = random_book(300, empty_frac=0.3)
    feats, mid, stats = book_features(book, n_train=200)
    assert feats.shape == (300, 40) and feats.dtype == np.float32 and np.isfinite(feats).all()
    np.testing.assert_allclose(mid, book.mid())  # best levels are never empty here
    train = fill_book(book.levels, TICK).reshape(300, 40)[:200]
    assert stats["price_mean"] == pytest.approx(train[:, 0::2].mean())  # ask_px, bid_px columns
    assert stats["size_std"] == pytest.approx(train[:, 1::2].std())
    # a change after the training split leaves the statistics (hence earlier rows) untouched
    book.levels[250:, :, 1] *= 100
    feats2, _, _ = book_features(book, n_train=200)
    np.testing.assert_array_equal(feats[:200], feats2[:200])


# ----------------------------------------------------------------------------------------- the network


def test_bin_on_constant_input_is_finite_with_finite_gradients() -> None:
    bin_ = BiN(num_features=40, seq_len=16)
    x = torch.full((3, 40, 16), 7.5, requires_grad=True)
    y = bin_(x)
    assert torch.isfinite(y).all()
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in bin_.parameters())
    # constant in time only (a different constant per feature): also finite
    z = bin_(torch.arange(40.0)[None, :, None].expand(2, 40, 16))
    assert torch.isfinite(z).all()


def test_bin_z_scores_each_feature_over_time() -> None:
    bin_ = BiN(num_features=4, seq_len=6)
    with torch.no_grad():  # keep only the temporal branch, with unit scale and no shift
        bin_.scale_time.fill_(1.0)
        bin_.mix_raw.copy_(torch.tensor([20.0, -40.0]))  # softplus: ~20 and ~0
    x = torch.randn(2, 4, 6) * 5 + 3
    y = bin_(x) / torch.nn.functional.softplus(torch.tensor(20.0))
    torch.testing.assert_close(y.mean(dim=2), torch.zeros(2, 4), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(dim=2, unbiased=True), torch.ones(2, 4), atol=1e-4, rtol=0)


def _one_branch(bin_: BiN, branch: int) -> None:
    """Unit scale, no shift, and all the mix on one branch (0: temporal z, 1: feature z), weight ~1."""
    with torch.no_grad():
        bin_.scale_time.fill_(1.0)
        bin_.scale_feat.fill_(1.0)
        big, off = 30.0, -60.0  # softplus(30) = 30 (to 1e-13), softplus(-60) ~ 1e-26
        bin_.mix_raw.copy_(torch.tensor([big, off] if branch == 0 else [off, big]))


def test_bin_divides_by_the_unbiased_std_as_the_reference() -> None:
    # by hand: the column (0, 2) over two time steps has mean 1 and sample std sqrt(2) (population std: 1),
    # so its z-scores are -1/sqrt(2), +1/sqrt(2) (the population std would give -1, +1)
    bin_ = BiN(num_features=1, seq_len=2)
    _one_branch(bin_, 0)
    y = bin_(torch.tensor([[[0.0, 2.0]]])) / 30.0
    torch.testing.assert_close(y, torch.tensor([[[-1.0, 1.0]]]) / 2 ** 0.5, atol=1e-6, rtol=0)
    # the feature branch too: features (1, 2, 3, 6) at one step: mean 3, sample std sqrt(14/3)
    bin_ = BiN(num_features=4, seq_len=1)
    _one_branch(bin_, 1)
    y = bin_(torch.tensor([[[1.0], [2.0], [3.0], [6.0]]])) / 30.0
    expected = torch.tensor([-2.0, -1.0, 0.0, 3.0]) / (14 / 3) ** 0.5
    torch.testing.assert_close(y.flatten(), expected, atol=1e-6, rtol=0)


def test_tlob_block_adds_its_input_again_after_the_mlp() -> None:
    # A hand-worked block of width 2 on one token x = (1, 3): attention and MLP weights zeroed, so
    #   h = norm1(x + 0) = (-1, 1);  y = gelu(norm2(0 + h)) = (gelu(-1), gelu(1)) = (-0.1586553, 0.8413447)
    # and the reference adds the block input once more: y + x = (0.8413447, 3.8413447).
    block = TLOBBlock(dim=2, heads=1, out_dim=2)
    with torch.no_grad():
        for lin in (block.proj, block.fc1, block.fc2):
            lin.weight.zero_()
            lin.bias.zero_()
    out = block(torch.tensor([[[1.0, 3.0]]]))
    torch.testing.assert_close(out, torch.tensor([[[0.8413447, 3.8413447]]]), atol=1e-4, rtol=0)
    # a shrinking block (the last layer) has no residual: its output is gelu(norm2(mlp(h))) alone
    shrink = TLOBBlock(dim=4, heads=1, out_dim=2)
    with torch.no_grad():
        shrink.fc2.weight.zero_()
        shrink.fc2.bias.copy_(torch.tensor([-1.0, 1.0]))
    out = shrink(torch.randn(1, 3, 4) * 100)
    torch.testing.assert_close(out, torch.tensor([-0.1586553, 0.8413447]).expand(1, 3, 2), atol=1e-4, rtol=0)


def test_bin_mixing_weights_stay_the_same_parameters_during_training() -> None:
    bin_ = BiN(num_features=4, seq_len=6)
    before = bin_.mix_raw
    opt = torch.optim.SGD(bin_.parameters(), lr=10.0)
    for _ in range(3):  # large steps that would push a raw weight negative
        bin_(torch.randn(2, 4, 6)).sum().backward()
        opt.step()
        opt.zero_grad()
    assert bin_.mix_raw is before  # the optimiser still holds the module's parameter
    assert torch.isfinite(bin_(torch.randn(2, 4, 6))).all()


@pytest.mark.parametrize(("seq_len", "hidden", "layers", "heads"), [(16, 8, 2, 1), (10, 6, 1, 2), (32, 20, 4, 1)])
def test_tlob_output_shape(seq_len: int, hidden: int, layers: int, heads: int) -> None:
    net = TLOB(40, seq_len, hidden, layers, heads)
    out = net(torch.randn(5, seq_len, 40))
    assert out.shape == (5, 3)
    assert torch.isfinite(net(torch.ones(2, seq_len, 40))).all()  # a constant window


def test_tlob_paper_size_head_and_parameter_count() -> None:
    net = TLOB(40, 128, 40, 4, 1)
    # the last layer shrinks to (128/4) x (40/4) = 320; the head divides by 4 once to 80, then 3
    linears = [m for m in net.head if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(320, 80), (80, 3)]
    assert 1_000_000 < sum(p.numel() for p in net.parameters()) < 1_300_000


# ------------------------------------------------------------------------------------------- training


def test_one_optimiser_step_lowers_the_loss_on_a_fixed_batch() -> None:
    tr = build(tiny("model.lr=1e-3"), book_data(random_book(400)), CPU)
    ends = tr.ends[:32]
    tr.module.train()
    before, _ = tr.loss(ends)
    before.backward()
    tr.optimizer.step()
    tr.optimizer.zero_grad()
    after, _ = tr.loss(ends)
    assert after.item() < before.item()


def test_train_epoch_returns_finite_device_scalars_and_info_reports_class_balance() -> None:
    tr = build(tiny(), book_data(random_book(400)), CPU)
    out = tr.train_epoch()
    assert set(out) == {"loss", Series.GRAD_NORM, "accuracy"}
    assert all(isinstance(v, torch.Tensor) and v.ndim == 0 and torch.isfinite(v) for v in out.values())
    assert tr.samples_per_epoch == (tr.n_windows // 16) * 16 and tr.batch_size == 16
    info = tr.info()
    fracs = [info["label_frac_up"], info["label_frac_stat"], info["label_frac_down"]]
    assert sum(fracs) == pytest.approx(1.0) and min(fracs) > 0
    assert info["num_params"] == sum(p.numel() for p in tr.module.parameters())
    assert info["label_alpha"] > 0
    # training windows end before the split, with their label inside it
    n_train = int(400 * 0.8)
    assert tr.ends.max().item() + 4 < n_train and tr.ends.min().item() >= 7
    assert (tr.y[tr.ends] >= 0).all()


def test_inference_runs_at_any_batch_size() -> None:
    tr = build(tiny(), book_data(random_book(400)), CPU)
    assert tr.inference(1)().shape == (1, 3)
    assert tr.inference(tr.n_windows + 5)().shape == (tr.n_windows + 5, 3)


def test_book_with_empty_levels_trains_finite() -> None:
    tr = build(tiny(), book_data(random_book(400, empty_frac=0.3)), CPU)
    assert torch.isfinite(tr.train_epoch()["loss"])


# ---------------------------------------------------------------------------------------------- build


def test_build_refuses_bar_data(market_data: MarketData) -> None:
    with pytest.raises(ModelDataError, match="tlob needs MBP-10 order-book data: run with data=mbp10"):
        build(tiny(), market_data, CPU)


def test_build_refuses_a_too_short_book_and_says_how_many_events() -> None:
    cfg = tiny()
    need = min_events(cfg.seq_len, cfg.horizon, cfg.smooth, cfg.batch_size, 0.8)
    # training split: max(8, 2) + 4 + 16 - 1 = 27 events; 27 / 0.8 = 33.75 -> 34 events in all
    assert need == 34
    build(cfg, book_data(random_book(need)), CPU)  # exactly enough
    with pytest.raises(ModelDataError, match=rf"about {need} book events.*the book has {need - 1} events"):
        build(cfg, book_data(random_book(need - 1)), CPU)


def test_default_minimum_book_length() -> None:
    d = TLOBConfig()
    assert min_events(d.seq_len, d.horizon, d.smooth, d.batch_size, 0.8) == 339


# ------------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_train_epoch_on_cuda_without_host_syncs() -> None:
    ctx = BuildContext(device=torch.device("cuda"))
    tr = build(tiny(), book_data(random_book(400)), ctx)
    tr.train_epoch()  # first call: allocations and lazy init may sync
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = tr.train_epoch()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(out["loss"]).item()


# --------------------------------------------------------------------------------------------- config


@pytest.fixture
def conf_dir(tmp_path: Path) -> Path:
    """The repo's conf tree, with stand-ins for data configs this branch does not hold."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "data").mkdir(exist_ok=True)
    for name, schema in (("6e_ohlcv_1m", "ohlcv-1m"), ("mbp10", "mbp-10")):
        f = conf / "data" / f"{name}.yaml"
        if not f.exists():
            f.write_text(f"defaults: [base_data, _self_]\nname: {name}\nschema: {schema}\n")
    return conf


def _compose(conf: Path, overrides: list[str]):
    from trainbench.compose import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def test_model_tlob_selects_book_data_unless_data_is_given(conf_dir: Path) -> None:
    cfg = _compose(conf_dir, ["model=tlob", "size=small"])
    assert cfg.data.schema == "mbp-10" and "data" not in cfg.model
    model = OmegaConf.to_object(cfg.model)
    assert isinstance(model, TLOBConfig) and model.name == "tlob"
    assert model == TLOBConfig()  # the small size is the schema's defaults
    cfg = _compose(conf_dir, ["model=tlob", "data=6e_ohlcv_1m", "model.seq_len=128"])
    assert cfg.data.schema == "ohlcv-1m" and cfg.model.seq_len == 128
