"""TFT's variable-importance artifacts: a table and a bar chart of the selection weights, and the attention.

:meth:`trainbench.models.tft.TFTTrainable.importances` computes them on a fixed held-out batch; :func:`write`
turns them into the files logged with the run (under ``model/``). matplotlib is imported here only, when
the chart is drawn, so that a model module loads no plotting library.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

TABLE = "tft_variable_importance.csv"
CHART = "tft_variable_importance.png"
ATTENTION = "tft_attention.csv"


def write(imp: dict[str, Any], outdir: Path) -> list[Path]:
    """``tft_variable_importance.csv`` + ``.png`` and ``tft_attention.csv`` (mean attention by offset) in
    ``outdir``, from ``importances()``'s dict; returns their paths."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    horizons = list(imp["attention"])
    table = outdir / TABLE
    with table.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["group", "variable", "importance", "windows", "split"])
        for group in ("static", "encoder", "decoder"):
            for var, value in sorted(imp[group].items(), key=lambda kv: -kv[1]):
                w.writerow([group, var, f"{value:.6f}", imp["windows"], imp["split"]])
    attention = outdir / ATTENTION
    with attention.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["offset"] + [f"h{h}" for h in horizons])
        for j, off in enumerate(imp["offsets"]):
            w.writerow([off] + [f"{imp['attention'][h][j]:.6f}" for h in horizons])
    chart = outdir / CHART
    bar_chart(imp, chart)
    return [table, chart, attention]


def bar_chart(imp: dict[str, Any], path: Path) -> None:
    """Three horizontal bar panels (static, encoder, decoder); Agg canvas, no pyplot global state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    groups = ("encoder", "decoder", "static")
    heights = [max(len(imp[g]), 1) for g in groups]
    fig = Figure(figsize=(7, 1.2 + 0.32 * sum(heights)))
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(groups), 1, gridspec_kw={"height_ratios": heights})
    for ax, g in zip(axes, groups, strict=True):
        items = sorted(imp[g].items(), key=lambda kv: kv[1])
        ax.barh([k for k, _ in items], [v for _, v in items], color="tab:blue")
        ax.set_xlim(0, 1)
        ax.set_title(f"{g} variables", fontsize=9, loc="left")
        ax.tick_params(labelsize=8)
    axes[-1].set_xlabel("mean selection weight")
    fig.suptitle(f"TFT variable importance ({imp['windows']} {imp['split']} windows)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
