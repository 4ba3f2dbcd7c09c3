"""Workload maths: model presets, parameter and FLOP counts, per-layer operations, collective
bytes, and memory per GPU under a parallelism plan."""
