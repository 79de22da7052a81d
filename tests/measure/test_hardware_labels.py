"""One hardware description: the run's `device` tag, the benchmark figures' hardware label and the CPU's
name each come from one function of `trainbench.measure.hardware`, defined nowhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from trainbench.measure import hardware
from trainbench.measure.hardware import cpu_name, device_label, hardware_label

REPO = Path(__file__).resolve().parents[2]


def test_the_device_tag_is_short_and_the_benchmark_label_names_cpu_and_threads():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert device_label(torch.device("cpu")) == "cpu"
        assert hardware_label("cpu") == hardware_label(torch.device("cpu")) == f"cpu ({cpu_name()}, 1 thread)"
        torch.set_num_threads(2)
        assert hardware_label("cpu") == f"cpu ({cpu_name()}, 2 threads)"
    finally:
        torch.set_num_threads(before)
    assert cpu_name()  # /proc/cpuinfo's model name, or what platform knows


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_both_are_its_name():
    name = torch.cuda.get_device_name(0)
    assert device_label(torch.device("cuda", 0)) == hardware_label("cuda:0") == name


def test_each_hardware_function_is_defined_once():
    names = {"cpu_name", "device_label", "hardware_label"}
    files = [*sorted((REPO / "src").rglob("*.py")), *sorted((REPO / "benchmarks").glob("*.py")),
             *sorted((REPO / "scripts").glob("*.py"))]
    where = {}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.FunctionDef) and node.name in names:
                where.setdefault(node.name, []).append(str(f.relative_to(REPO)))
    home = str(Path(hardware.__file__).resolve().relative_to(REPO))
    assert where == {n: [home] for n in names}
