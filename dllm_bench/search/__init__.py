"""Frontier search: Hydra's Optuna sweeper over a rule's parameters, every trial an ordinary run (docs/frontier.md)."""
