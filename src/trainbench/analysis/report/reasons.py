"""What lowers confidence, one line per kind: the decision's reasons grouped by kind, each with the models it
touches (console and report.md); the full per-model words stay in the per-model detail."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainbench.analysis.report_types import Report
from trainbench.analysis.statistics.stats import WARNING_KINDS

#: Per-model reasons of the decision that are not a stability warning, by the words they start with: the kind
#: they are listed under.
MODEL_REASON_KINDS = (
    (re.compile(r"\d+ epochs used, fewer than decision\.min_epochs"), "fewer epochs used than decision.min_epochs"),
    (re.compile(r"training produced non-finite"), "training produced non-finite losses or gradients"),
    (re.compile(r"\d+ run\(s\) did not complete"), "runs that did not complete"),
    (re.compile(r"timed on a busy machine"), "timed on a busy machine (contaminated epochs used): measure again "
                                             "on a quiet machine"),
    (re.compile(r"epochs configured"), "epochs the curves could not estimate (the configured epochs are used)"),
    (re.compile(r"data scaling not trusted"), "data scaling not trusted"),
    (re.compile(r"its curve overfits after epoch"), "a curve overfits: its val_loss rose above its start after its "
                                                    "best epoch while the training loss fell (the plan says after "
                                                    "which; fewer epochs, more data or regularisation)"),
    (re.compile(r"its curve got worse than its start after epoch"), "a curve got worse than its start after its "
                                                                    "best epoch (the plan says after which)"),
    (re.compile(r"epochs converted to the planned data .* alpha unmeasured"),
     "epochs converted to the planned data with the data exponent alpha unmeasured (spans [0, 1]): train the "
     "model at two data sizes (`python run.py -m model=<m> data.n_bars=10000,40000`) to measure it"),
    (re.compile(r"interval of the mean unresolved"), "interval of the mean unresolved: the conservative total "
                                                     "cannot bound it; train more seeds or more epochs"),
)


@dataclass
class ReasonKind:
    """One line of "What lowers confidence": a kind of reason and the models it touches (none: the sweep's)."""

    text: str
    models: list[str] = field(default_factory=list)

    def line(self) -> str:
        return self.text + (f" ({', '.join(self.models)})" if self.models else "")


def _kind_of(report: Report, models: list[str], rest: str) -> str:
    for m in models:
        s = report.models[m].stability
        if rest in s.warnings:
            kind = s.warning_kinds[s.warnings.index(rest)] if len(s.warning_kinds) == len(s.warnings) else None
            return WARNING_KINDS.get(kind, rest)
    for pattern, text in MODEL_REASON_KINDS:
        if pattern.match(rest):
            return text
    return rest


def reason_kinds(report: Report) -> list[ReasonKind]:
    """The decision's ``confidence_reasons`` grouped by kind, in the order each kind first appears (the most
    severe first, as the reasons are); a reason about the whole sweep is a kind of its own."""
    out: dict[str, ReasonKind] = {}
    for reason in report.decision.confidence_reasons:
        head, sep, rest = reason.partition(": ")
        names = [n.strip() for n in head.split(",")] if sep else []
        if names and all(n in report.models for n in names):
            kind = out.setdefault(_kind_of(report, names, rest), ReasonKind(_kind_of(report, names, rest)))
            kind.models += [n for n in names if n not in kind.models]
        else:
            out.setdefault(reason, ReasonKind(reason))
    return list(out.values())
