"""The evaluated cards' shared runner: one real ``python -m dllm_bench.run`` per setting, its summary as a row, and
the command line that renders a card."""

from __future__ import annotations

import pytest

from dllm_bench.tiny import block_card
from dllm_bench.tiny.card_runs import card_main, run_settings


def test_a_setting_runs_once_into_a_row_with_its_fields_command_and_summary():
    args = ["model=tiny_llada", "task=sudoku", "rule=threshold", "gen_length=24", "block_length=8", "limit=2",
            "batch_size=2", "seed=0"]
    [row] = run_settings([({"early_stop": True}, args)])
    assert row["early_stop"] is True and row["command"] == "python -m dllm_bench.run " + " ".join(args)
    assert row["puzzles"] == 2 and row["ci"][0] <= row["accuracy"] <= row["ci"][1] and row["nfe_mean"] > 0
    assert row["wall_s"] > 0 and row["device"] and row["date_utc"]


def test_card_only_renders_the_recorded_results_into_the_directory(tmp_path):
    fmt = sorted(block_card.FORMATS)[0]
    card_main("card", "format", block_card.FORMATS, evaluate=None, render=block_card.render,
              directory=lambda name: tmp_path, argv=[fmt, "--card-only"])
    assert (tmp_path / "MODEL_CARD.md").read_text() == block_card.render(fmt)


def test_an_unknown_choice_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        card_main("card", "format", block_card.FORMATS, evaluate=None, render=block_card.render,
                  directory=lambda name: None, argv=["no_such_format", "--card-only"])
    assert exit_info.value.code == 2 and "no_such_format" in capsys.readouterr().err
