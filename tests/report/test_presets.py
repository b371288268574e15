"""Each table's preset composes, and the command printed for a cell composes to exactly that cell's config."""

from __future__ import annotations

import shlex

from hydra import compose, initialize_config_dir

from dllm_bench.report.build import cell_command
from dllm_bench.report.runs import compose_configs, identity
from dllm_bench.report.tables import TABLES, table_cells
from dllm_bench.runner.config import CONF_DIR, flatten, to_container


def test_every_table_has_a_preset_file():
    assert {p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")} >= set(TABLES)


def test_printed_commands_compose_to_the_cells_config():
    picks = []
    for spec in TABLES.values():
        cells = [c for c in table_cells(spec) if c.unavailable is None]
        if cells:
            picks.append((spec, cells[-1]))
    ours = compose_configs([(spec.preset, cell.overrides) for spec, cell in picks])
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        for (spec, cell), expected in zip(picks, ours):
            argv = shlex.split(cell_command(spec, cell))[1:]
            got = to_container(compose(config_name="config", overrides=argv))
            assert got == expected, spec.name
            assert got["name"] == ("tiny_table" if spec.name == "tiny" else spec.name)
            assert identity(flatten(got))["batch_size"] == (1 if spec.needs_gpu else 8)


def test_a_cell_the_harness_cannot_run_says_why():
    llama = [c for c in table_cells(TABLES["slowfast_t4"]) if c.published and c.published["model"] == "LLaMA3-8B"]
    assert len(llama) == 1 and "not a diffusion model" in llama[0].unavailable and not llama[0].overrides
