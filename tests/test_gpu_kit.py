"""The GPU run kit (scripts/gpu_kit.py, scripts/gpu_run.sh): its package list keeps up with the imports of
src/, its closure check catches what a GPU run would miss, and the run script fails fast without a GPU."""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_kit.py"
# Imports that the GPU run may lack on purpose, with the reason (each is imported inside a guard).
OPTIONAL = {"mamba_ssm": "the fused Mamba-2 kernels (extra `mamba`): model.kernel=auto falls back to PyTorch",
            "hydra_plugins": "the SLURM launcher plugin (extra `slurm`): registered only when "
                             "hydra_submitit_launcher imports; the GPU run uses Hydra's basic launcher",
            "submitit": "imported by trainbench.sweep.slurm, which only the SLURM launcher plugin loads"}


def _kit():
    spec = importlib.util.spec_from_file_location("gpu_kit", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_kit", mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _third_party_imports() -> dict[str, str]:
    """Top-level module -> first file importing it, over what runs on the GPU machine."""
    files = [*sorted((ROOT / "src").rglob("*.py")), ROOT / "run.py", ROOT / "analyze.py",
             ROOT / "scripts" / "gpu_check.py"]
    found: dict[str, str] = {}
    # the package itself and the benchmark modules (gpu_check puts benchmarks/ on the path)
    local = {"trainbench", *(p.stem for p in (ROOT / "benchmarks").glob("*.py"))}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                top = n.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local and top != "__future__":
                    found.setdefault(top, str(f.relative_to(ROOT)))
    return found


def test_every_third_party_import_of_src_is_on_the_gpu_machine_or_in_the_kit():
    kit = _kit()
    present = kit.present_names()
    carried = {canonicalize_name(r.name) for r in kit.top_requirements()}
    dists = md.packages_distributions()
    missing = []
    for module, where in sorted(_third_party_imports().items()):
        if module in OPTIONAL:
            continue
        names = {canonicalize_name(d) for d in dists.get(module, [module])}
        if not names & (present | carried):
            missing.append(f"{module} (imported in {where}; distributions {sorted(names)})")
    assert not missing, ("imports the GPU kit does not cover: add each distribution to "
                         "scripts/gpukit/requirements.txt (or to OPTIONAL here, with the guard's reason): "
                         + "; ".join(missing))


def test_the_kit_names_the_packages_the_gpu_machine_lacks():
    kit = _kit()
    present = kit.present_names()
    carried = {canonicalize_name(r.name) for r in kit.top_requirements()}
    # The device notes: torch and the scientific stack are there; Hydra, MLflow and Databento's readers are not.
    assert {"torch", "numpy", "scipy", "pandas", "matplotlib", "psutil", "nvidia-ml-py", "pyyaml"} <= present
    assert {"hydra-core", "omegaconf", "mlflow-skinny", "databento", "databento-dbn", "zstandard"} <= carried
    assert not carried & present, "a package the GPU machine already has is carried again"


def _fake_wheel(folder: Path, name: str, version: str, requires: list[str]) -> None:
    dist = f"{name.replace('-', '_')}-{version}"
    meta = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                      *[f"Requires-Dist: {r}" for r in requires]]) + "\n"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", meta)


def test_closure_check_finds_missing_wrong_duplicate_and_unneeded_wheels(tmp_path):
    from packaging.requirements import Requirement

    kit = _kit()
    _fake_wheel(tmp_path, "alpha", "1.0", ["beta>=2", "numpy", "gamma; python_version < '3.8'",
                                          "delta; extra == 'docs'", "eps; sys_platform == 'win32'"])
    _fake_wheel(tmp_path, "beta", "1.5", ["zeta"])
    _fake_wheel(tmp_path, "stray", "0.1", [])
    problems = kit.check_closed(tmp_path, {"numpy"}, [Requirement("alpha")])
    text = "\n".join(problems)
    assert "beta>=2" in text and "beta 1.5" in text  # version not satisfied
    assert "zeta" in text and "neither in the kit nor on the GPU machine" in text  # missing
    assert "stray" in text and "nothing requires it" in text
    assert "gamma" not in text and "delta" not in text and "eps" not in text  # markers evaluated for 3.12 Linux
    _fake_wheel(tmp_path, "beta", "2.0", ["zeta"])
    assert any("2 versions" in p for p in kit.check_closed(tmp_path, {"numpy", "zeta"}, [Requirement("alpha")]))
    for p in tmp_path.glob("beta-1.5*"):
        p.unlink()
    for p in tmp_path.glob("stray*"):
        p.unlink()
    assert kit.check_closed(tmp_path, {"numpy", "zeta"}, [Requirement("alpha")]) == []


@pytest.mark.skipif(not any((ROOT / ".whl").glob("*.whl")), reason="no kit built here (make gpu-kit)")
def test_the_built_kit_passes_its_offline_checks():
    p = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[FAIL]" not in p.stdout


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="checks the no-GPU path")
def test_gpu_run_without_a_gpu_says_so_with_its_own_exit_code(tmp_path):
    t0 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_run.sh"), str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=60, env=env)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "no GPU visible" in p.stdout + p.stderr and "Traceback" not in p.stdout + p.stderr
    assert time.perf_counter() - t0 < 30
    assert (tmp_path / "out" / "gpu_run.log").exists()


def test_gpu_run_without_an_output_folder_is_a_usage_error():
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_run.sh")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and "usage: bash scripts/gpu_run.sh OUT_DIR" in p.stderr
