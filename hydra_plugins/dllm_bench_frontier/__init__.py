"""dllm-bench's Hydra plugin: the frontier sweeper (`hydra/sweeper=frontier`, docs/frontier.md)."""
