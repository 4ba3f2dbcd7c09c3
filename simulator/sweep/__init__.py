"""What-if sweeps: many layouts from one spec, automatic parallelism, Pareto fronts and the best
layout under constraints."""
