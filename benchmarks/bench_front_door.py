"""The front door: how long a command takes to answer before it does any work, as a ratio to ``python -c pass``
(the interpreter's own start) measured side by side, each a fresh process, interleaved round-robin.

- ``front_door.config_error``: ``run.py trainer.epochs=-1``, a value out of range: one ``error:`` line, exit 2
  (target 1.5 s);
- ``front_door.unknown_model``: ``run.py model=nope``, Hydra's message, exit 2 (target 1.5 s);
- ``front_door.help``: ``run.py --help``, exit 0 (target 2 s);
- ``front_door.analyze_missing_store``: ``analyze.py`` on a store that is not there, exit 2 (target 1.5 s).

None of them loads torch, MLflow or a model's code (tests/test_layout.py checks that); what is left is Python,
Hydra, OmegaConf and the schemas. The targets are seconds on the 2-core CPU machine when it is quiet; the figure
is the ratio, which a shared machine's load moves less than the seconds (both are in ``details``). Each command
runs in an empty temporary folder (no team ``conf/``; run.py's output folder lands there).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from common import Result, interleaved

ROOT = Path(__file__).resolve().parents[1]

#: name: (arguments after the interpreter, expected exit status, target seconds)
CASES: dict[str, tuple[list[str], int, float]] = {
    "config_error": ([str(ROOT / "run.py"), "trainer.epochs=-1"], 2, 1.5),
    "unknown_model": ([str(ROOT / "run.py"), "model=nope"], 2, 1.5),
    "help": ([str(ROOT / "run.py"), "--help"], 0, 2.0),
    "analyze_missing_store": ([str(ROOT / "analyze.py"), "tracking.uri=sqlite:///{tmp}/none.db"], 2, 1.5),
}


def _command(args: list[str], expected: int, cwd: str) -> Callable[[], None]:
    def call() -> None:
        p = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
        if p.returncode != expected:  # a front door that answers otherwise is not what is timed here
            raise RuntimeError(f"{' '.join(args)} exited {p.returncode}, not {expected}: {p.stderr[-500:]}")
    return call


def run(quick: bool) -> list[Result]:
    from trainbench.measure.hardware import hardware_label

    repeats = 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="tb-bench-front-door-") as tmp:
        fns = {"python -c pass": _command(["-c", "pass"], 0, tmp)}
        for name, (args, expected, _) in CASES.items():
            fns[name] = _command([a.format(tmp=tmp) for a in args], expected, tmp)
        med = interleaved(fns, repeats)
    base = med["python -c pass"]
    out = []
    for name, (args, expected, target_s) in CASES.items():
        command = " ".join([Path(args[0]).name, *args[1:]])
        out.append(Result(f"front_door.{name}", med[name] / base, "x python -c pass",
                          target=f"<= {target_s:g} s ({target_s / base:.0f}x here)", device=hardware_label("cpu"),
                          details={"command": command,
                                   "exit": expected, "seconds": round(med[name], 3),
                                   "python_pass_s": round(base, 4), "target_s": target_s,
                                   "within_target": med[name] <= target_s, "repeats": repeats,
                                   "how": "median of interleaved fresh processes, after one untimed call each"}))
    return out
