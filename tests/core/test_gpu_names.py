"""GPU identity's one home (core/gpu_names.py): the run's MFU and the analysis' catalogue tell the same
boards apart."""

from __future__ import annotations

import pytest

from trainbench.analysis.projection import gpus
from trainbench.core.gpu_names import catalogue_entries, matching_entry, same_gpu
from trainbench.measure.flops import peak_tflops

GPUS = gpus.load_gpus(gpus.default_conf_dir())  # the packaged catalogue (not a team's conf/hardware)


@pytest.mark.parametrize("device,entry", [
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", None), ("NVIDIA A100-SXM4-40GB", "a100_40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100_80gb"), ("NVIDIA A100-PCIE-40GB", "a100_40gb_pcie"),
    ("NVIDIA A100 80GB PCIe", "a100_80gb_pcie"), ("NVIDIA H100 80GB HBM3", "h100_sxm"), ("NVIDIA H100 PCIe", "h100_pcie"),
    ("NVIDIA H100 NVL", None), ("Tesla V100-SXM2-16GB", "v100_16gb"), ("Tesla V100-SXM2-32GB", "v100_sxm2_32gb"),
    ("Tesla V100-PCIE-16GB", "v100_pcie_16gb"), ("Tesla V100-PCIE-32GB", "v100_pcie_32gb"), ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 3050 Ti Laptop GPU", "rtx3050ti_4gb"), ("NVIDIA B200", None)])
def test_mfu_and_the_analysis_name_the_same_entry(device, entry):
    g = gpus.gpu_for_device(GPUS, device)
    assert (g.name if g else None) == entry
    value, why = peak_tflops(device, "fp32")
    assert (why.startswith(f"hardware={entry} ") if entry else value is None), why


@pytest.mark.parametrize("device,precision,peak", [
    # each variant's MFU divides by its own board's peak, never the other variant's
    ("NVIDIA A100 80GB PCIe", "bf16", 312.0), ("NVIDIA H100 PCIe", "bf16", 756.0),
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4), ("Tesla V100-PCIE-16GB", "fp16", 112.0),
    ("Tesla V100-SXM2-16GB", "fp16", 125.0), ("Tesla V100-PCIE-32GB", "fp32", 14.0),
    ("Tesla V100-SXM2-32GB", "fp32", 15.7)])
def test_mfu_peaks_are_the_variants_own(device, precision, peak):
    assert peak_tflops(device, precision)[0] == peak
    spec = gpus.gpu_for_device(GPUS, device)
    assert spec.peak_tflops[precision] == peak


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


@pytest.mark.parametrize("names,memory_gb,entries", [
    # a cloud catalogue's names (accelerator, GpuInfo name, instance type) and memory per GPU -> the entries
    (["H100", "H100", "p5.4xlarge"], 80, ["h100_pcie", "h100_sxm"]),  # not told: both (the caller takes the slower)
    (["H100", "H100", "gpu_1x_h100_pcie"], 80, ["h100_pcie"]),
    (["H100", "H100", "gpu_1x_h100_sxm5"], 80, ["h100_sxm"]),  # SXM5: the entry naming no form
    (["H100-SXM", "H100 SXM", "1x_H100-SXM_SECURE"], 80, ["h100_sxm"]),
    (["H100-NVL", "H100 NVL", ""], 94, []),  # NVL: another board, no entry
    (["A100-80GB", "A100 PCIe", ""], 80, ["a100_80gb_pcie"]),
    (["A100", "A100", "gpu_1x_a100_sxm4"], 40, ["a100_40gb"]),
    (["A100", "", ""], 80, ["a100_80gb", "a100_80gb_pcie"]),  # the memory picks the 80 GB entries
    (["V100-32GB", "V100", "p3dn.24xlarge"], None, ["v100_pcie_32gb", "v100_sxm2_32gb"]),  # size from the name
    (["A10", "A10", "gpu_1x_a10"], 24, []),  # an A10 is not the A10G
    (["L40S", "L40S", "g6e.xlarge"], 45, []),  # nor an L40S the L4
    (["H200-SXM", "H200 SXM", ""], 141, ["h200"]),
])
def test_catalogue_names_map_onto_entries_by_the_same_rule(names, memory_gb, entries):
    assert sorted(catalogue_entries({k: g.gpu for k, g in GPUS.items()}, names, memory_gb)) == entries
