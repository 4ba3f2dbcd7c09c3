"""Calibration: a real torch.distributed probe, fits of the model's parameters, live validation."""
