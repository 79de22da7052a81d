"""Workload profiles as runs record them (the aggregate ``workload.<class>.<dtype>.<what>`` metrics of one
epoch), for the projection tests: real CPU profiles, not made-up figures."""

from __future__ import annotations

# Workload profiles as the runs record them (per epoch), from CPU profiles of a small DQN (5 updates) and
# one step of the reference-size TFT (experiment=tft_volatility) made with trainbench.measure.workload.
DQN = {"workload.elementwise_norm.fp32.bytes": 7.7e7, "workload.elementwise_norm.fp32.ops": 669,
       "workload.matmul_attention.fp32.flops": 5.9e8, "workload.matmul_attention.fp32.bytes": 2.4e7,
       "workload.matmul_attention.fp32.ops": 85, "workload.optimizer.fp32.bytes": 2.0e7,
       "workload.optimizer.fp32.ops": 155}
TFT = {"workload.elementwise_norm.fp32.bytes": 8.9e9, "workload.elementwise_norm.fp32.ops": 370,
       "workload.matmul_attention.fp32.flops": 1.5e11, "workload.matmul_attention.fp32.bytes": 3.5e9,
       "workload.matmul_attention.fp32.ops": 156, "workload.optimizer.fp32.bytes": 2.6e8,
       "workload.optimizer.fp32.ops": 578}
