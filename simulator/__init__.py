"""clustersim: capacity planner for multi-GPU training clusters.

The package follows the data flow in DESIGN.md: ``config`` (scenario and profile schema) ->
``workload`` (model maths, memory) -> ``network`` / ``engine`` (simulation) -> ``metrics`` ->
``cost`` -> ``report``. ``cli`` is the thin command-line front end.
"""

__version__ = "0.1.0"
