"""Runner: config validation, run ids, resumable results store, summaries, sharding and progress."""
