"""The tiny checkpoints' evaluation results as a Markdown table (printed by `evaluate`, embedded in the model card)."""

from __future__ import annotations


def results_table(doc: dict) -> str:
    """Markdown table of one results document."""
    lines = [
        "| decoding | cache | solved % | valid grid % | mean NFE | tokens/forward | tokens/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in doc["results"]:
        if "skipped" in r:
            lines.append(f"| {r['label']} | {r['cache']} | n/a: {r['skipped']} | | | | |")
            continue
        lines.append(
            f"| {r['label']} | {r['cache']} | {100 * r['accuracy']:.1f} | {100 * r['valid_grid']:.1f} | "
            f"{r['mean_nfe']:.2f} | {r['tokens_per_forward']:.2f} | {r['tokens_per_s']:.0f} |"
        )
    return "\n".join(lines)
