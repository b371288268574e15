"""Write random-weight tiny LLaDA and Dream checkpoints in the real formats (for tests and third-party loaders).

    python scripts/make_tiny_checkpoints.py OUT_DIR [--d-model 64 --layers 2 --heads 4 --seed 0]
"""

from __future__ import annotations

import argparse

from dllm_bench.models.tiny_format import make_random_checkpoint


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for flavour in ("llada", "dream"):
        path = make_random_checkpoint(
            f"{args.out_dir}/tiny_{flavour}", flavour, seed=args.seed, d_model=args.d_model,
            n_layers=args.layers, n_heads=args.heads,
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
