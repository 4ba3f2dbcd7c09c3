"""Network model: topology, collective algorithms, bandwidth sharing between flows."""
