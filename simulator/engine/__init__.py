"""SimPy engine: one training step on the cluster (compute, communication, pipeline, I/O)."""
