"""What lowers confidence, one line per kind: the decision's reasons (data: kind, models, words; made in
analysis/decision/decision.py) grouped by kind, each with the models it touches (console and report.md); the
full per-model words stay in the per-model detail. Nothing here reads the reasons' words to find their kind."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainbench.analysis.report_types import ConfidenceReason, ReasonKind, Report
from trainbench.analysis.statistics.stats import WARNING_KINDS

#: The line a kind of per-model reason is listed under (a stability warning's: the statistics' WARNING_KINDS);
#: a kind without a line here is listed under its own words.
KIND_LINES = {
    ReasonKind.FEW_EPOCHS_USED: "fewer epochs used than decision.min_epochs",
    ReasonKind.NON_FINITE: "training produced non-finite losses or gradients",
    ReasonKind.INCOMPLETE_RUNS: "runs that did not complete",
    ReasonKind.BUSY_MACHINE: "timed on a busy machine (contaminated epochs used): measure again on a quiet machine",
    ReasonKind.EPOCHS_CONFIGURED: "epochs the curves could not estimate (the configured epochs are used)",
    ReasonKind.DATA_SCALE_UNTRUSTED: "data scaling not trusted",
    ReasonKind.CURVE_OVERFITS: "a curve overfits: its val_loss rose above its start after its best epoch while the "
                               "training loss fell (the plan says after which; fewer epochs, more data or "
                               "regularisation)",
    ReasonKind.CURVE_WORSENED: "a curve got worse than its start after its best epoch (the plan says after which)",
    ReasonKind.UNRESOLVED: "interval of the mean unresolved: the conservative total cannot bound it; train more "
                           "seeds or more epochs",
}


@dataclass
class ReasonLine:
    """One line of "What lowers confidence": a kind of reason and the models it touches (none: the sweep's)."""

    text: str
    models: list[str] = field(default_factory=list)

    def line(self) -> str:
        return self.text + (f" ({', '.join(self.models)})" if self.models else "")


def _line_of(reason: ConfidenceReason) -> str:
    """The line a reason is listed under: its kind's, else its own words (a reason about the sweep is a line of
    its own)."""
    if not reason.models:
        return reason.detail
    return KIND_LINES.get(reason.kind) or WARNING_KINDS.get(reason.kind) or reason.detail


def reason_kinds(report: Report) -> list[ReasonLine]:
    """The decision's reasons (``confidence_reason_kinds``) grouped by kind, in the order each kind first appears
    (the most severe first, as the reasons are)."""
    out: dict[str, ReasonLine] = {}
    for reason in report.decision.confidence_reason_kinds:
        text = _line_of(reason)
        kind = out.setdefault(text, ReasonLine(text))
        kind.models += [n for n in reason.models if n not in kind.models]
    return list(out.values())
