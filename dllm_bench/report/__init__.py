"""Reports: paper tables (published / reproduced / delta), aggregation, Pareto frontiers, confidence profiles."""
