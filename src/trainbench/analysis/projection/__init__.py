"""Projection to other GPUs: the catalogue, the kernel model, its calibration, the roofline, devices."""
