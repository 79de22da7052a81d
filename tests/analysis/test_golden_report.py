"""report.json on a fixed sweep is what it was: the golden report (tests/analysis/golden_report.json, built by
tests/analysis/golden_helpers.py) compared key for key, so that a refactoring of the analysis' stages changes no key
and no figure. A deliberate change of the report rewrites the golden file (``python
tests/analysis/golden_helpers.py``) in the commit that makes it, with the schema version bumped where a key changes."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from golden_helpers import GOLDEN, SCENARIOS, golden_report

from trainbench.analysis.report_types import SCHEMA_VERSION

#: What the report changed on purpose since the golden file was written (on the code before the analysis' stages
#: were typed, schema 7): each difference listed, with the schema version it came with
DELIBERATE = {
    "report.schema_version: 7, now 8": 8,
    "report.decision.confidence_reason_kinds: added": 8,  # the confidence reasons as data
}


def differences(want: Any, got: Any, where: str = "report") -> list[str]:
    """Every path where ``got`` differs from ``want``: a key missing or added, a type, a value (floats to 1e-9
    relative: the same arithmetic in another order)."""
    if isinstance(want, dict) and isinstance(got, dict):
        out = [f"{where}.{k}: missing" for k in want if k not in got]
        out += [f"{where}.{k}: added" for k in got if k not in want]
        for k in want.keys() & got.keys():
            out += differences(want[k], got[k], f"{where}.{k}")
        return out
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(want)} items, now {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got, strict=True)) for d in differences(a, b, f"{where}[{i}]")]
    if isinstance(want, float) and isinstance(got, int | float) and not isinstance(got, bool):
        same = math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(want) and math.isnan(got))
        return [] if same else [f"{where}: {want!r}, now {got!r}"]
    return [] if type(want) is type(got) and want == got else [f"{where}: {want!r}, now {got!r}"]


def test_differences_names_each_changed_path():
    want = {"a": 1.0, "b": [1, {"c": "x"}], "d": None}
    assert differences(want, want) == []
    got = {"a": 1.0 + 1e-12, "b": [1, {"c": "y"}], "e": 2}
    assert sorted(differences(want, got)) == ["report.b[1].c: 'x', now 'y'", "report.d: missing", "report.e: added"]
    assert differences({"a": 1.0}, {"a": 1.1}) == ["report.a: 1.0, now 1.1"]
    assert differences({"a": [1]}, {"a": [1, 2]}) == ["report.a: 1 items, now 2"]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_report_on_the_golden_sweep_is_unchanged(scenario):
    want = json.loads(GOLDEN.read_text())[scenario]
    got = golden_report(scenario)
    diff = [d for d in differences(want, got) if d not in DELIBERATE]
    assert not diff, (f"{len(diff)} difference(s) from {GOLDEN.name} ({scenario}); if deliberate, rewrite it with "
                      "`python tests/analysis/golden_helpers.py`:\n" + "\n".join(sorted(diff)[:40]))


def test_each_deliberate_change_came_with_its_schema_version():
    assert max(DELIBERATE.values()) == SCHEMA_VERSION
    # the reasons as data say what the reasons in words say, in the same order
    d = golden_report("partial")["decision"]
    kinds = d["confidence_reason_kinds"]
    assert [(", ".join(r["models"]) + ": " if r["models"] else "") + r["detail"] for r in kinds] == \
        d["confidence_reasons"]
    assert {r["kind"] for r in kinds} >= {"missing", "basis", "few_epochs_used", "noisy", "epochs_configured"}
    assert [r["severe"] for r in kinds] == sorted((r["severe"] for r in kinds), reverse=True)  # most severe first


def test_a_flattened_field_is_written_as_keys_of_its_row_and_read_back():
    from trainbench.analysis.fields import from_json, to_json
    from trainbench.analysis.report_types import Instance

    row = {"instance": "local", "gpu": "t4", "gpus": 1, "usd_per_hour": None, "price_date": None,
           "price_source": "electricity", "models": [], "missing": ["a"], "complete": False, "hours_serial": None,
           "hours_serial_range": None, "wall_hours": None, "wall_hours_range": None, "gpus_used": 0, "usd": None,
           "usd_range": None, "wall_hours_conservative": None, "usd_conservative": None, "basis": None,
           "model_basis": {}, "fits_all": None, "does_not_fit": [], "methods": []}
    inst = from_json(Instance, {**row, "within": {"within_24h": False}})  # as a stage builds it
    out = to_json(inst)
    assert out["within_24h"] is False and "within" not in out and "cloud" not in out  # omitted while None
    back = from_json(Instance, out)  # as report.json is read back
    assert back.within == {"within_24h": False} and back == inst
