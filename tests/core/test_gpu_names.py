"""GPU identity's one home (core/gpu_names.py): the run's MFU and the analysis' catalogue tell the same
boards apart."""

from __future__ import annotations

import pytest

from trainbench.analysis.projection import gpus
from trainbench.core.gpu_names import matching_entry, same_gpu
from trainbench.measure.flops import peak_tflops

GPUS = gpus.load_gpus()


@pytest.mark.parametrize("device,entry", [
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", None), ("NVIDIA A100-SXM4-40GB", "a100_40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100_80gb"), ("NVIDIA A100-PCIE-40GB", None), ("NVIDIA A100 80GB PCIe", None),
    ("NVIDIA H100 80GB HBM3", "h100_sxm"), ("NVIDIA H100 PCIe", None), ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 3050 Ti Laptop GPU", "rtx3050ti_4gb"), ("NVIDIA B200", None)])
def test_mfu_and_the_analysis_name_the_same_entry(device, entry):
    g = gpus.gpu_for_device(GPUS, device)
    assert (g.name if g else None) == entry
    value, why = peak_tflops(device, "fp32")
    assert (why.startswith(f"hardware={entry} ") if entry else value is None), why


def test_an_h200_nvl_does_not_count_as_h200_for_mfu():
    assert peak_tflops("NVIDIA H200", "bf16") == (989.4, "hardware=h200 (bf16)")
    value, why = peak_tflops("NVIDIA H200 NVL", "bf16")
    assert value is None and "no conf/hardware profile names 'NVIDIA H200 NVL'" in why
    assert not GPUS["h200"].matches("NVIDIA H200 NVL")


def test_the_most_specific_entry_wins():
    entries = {"a100": "NVIDIA A100", "a100_80gb": "NVIDIA A100 80GB"}
    assert matching_entry(entries, "NVIDIA A100 80GB") == "a100_80gb"
    assert matching_entry(entries, "NVIDIA A100") == "a100"
    assert matching_entry(entries, "NVIDIA A100 40GB") is None  # a size the entries do not name
    assert not same_gpu(None, "NVIDIA A100") and not same_gpu("NVIDIA A100", "")
