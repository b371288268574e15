"""The calibration diagnostic: an exactly calibrated model never strands a puzzle under factor or Fréchet."""

import numpy as np
import pytest
import torch

from dllm_bench.tasks.sudoku_puzzles import CELLS, DIGITS, completion_marginals, load_test_set
from dllm_bench.tiny.calibration import decoding_state_reliability, reliability, training_state_reliability
from dllm_bench.tiny.model_setup import build_tiny_model, build_tiny_tokenizer


class PosteriorModel(torch.nn.Module):
    """Returns the exact posterior as logits: digits from the valid grids agreeing with the visible cells."""

    def __init__(self, flavour: str, overconfidence: float = 1.0):
        super().__init__()
        tok = build_tiny_tokenizer(flavour)
        self.inner = build_tiny_model(flavour, tok, d_model=8, n_layers=1, n_heads=2, mlp_hidden_size=8)
        self.tokenizer, self.config = tok, self.inner.config
        self.digits = tok.convert_tokens_to_ids(list(DIGITS))
        self.overconfidence = overconfidence  # > 1 sharpens the posterior (a miscalibrated model)

    def forward(self, ids: torch.Tensor, logits_range: tuple[int, int]) -> torch.Tensor:
        lo, hi = logits_range
        answer = ids[:, lo:hi]
        known = torch.zeros(ids.shape[0], CELLS, dtype=torch.long)
        for d, tid in enumerate(self.digits, start=1):
            known[answer[:, :CELLS] == tid] = d
        # the clues are in the prompt: recover them from the answer-free puzzle text
        clues = torch.tensor(np.stack([self._clues(row[:lo]) for row in ids]))
        known = torch.where(clues > 0, clues, known)
        marg = torch.from_numpy(np.stack([self._marginals(row) for row in known.numpy()])).double()
        logits = torch.full((ids.shape[0], hi - lo, self.config.vocab_size), -1e9, dtype=torch.float64)
        logits[:, :CELLS, self.digits] = self.overconfidence * marg.clamp_min(1e-12).log()
        eot = self.config.eot_token_id
        logits[:, CELLS, eot] = 0.0
        logits[:, CELLS + 1:, self.config.eos_token_id] = 0.0
        return logits

    @staticmethod
    def _marginals(known: np.ndarray) -> np.ndarray:
        try:
            return completion_marginals(known[None])[0]
        except ValueError:  # a stranded state: any digit
            return np.full((CELLS, len(DIGITS)), 1 / len(DIGITS))

    def _clues(self, prompt_ids: torch.Tensor) -> np.ndarray:
        text = self.tokenizer.decode(prompt_ids.tolist(), skip_special_tokens=True)
        cells = [c for c in text if c in DIGITS + "."][-CELLS:]
        return np.array([0 if c == "." else int(c) for c in cells], dtype=np.int64)


@pytest.mark.parametrize("rule, value", [("frechet", 0.25), ("factor", 1.0)])
def test_a_calibrated_model_never_strands_a_puzzle(rule, value):
    rows = load_test_set()[:24]
    res = decoding_state_reliability(PosteriorModel("llada"), rows, rule, value)
    assert res["failed"] == 0 and res["puzzles"] == 24
    for row in res["committed"]:  # confidence equals the posterior probability in every bin
        assert abs(row["confidence"] - row["posterior"]) < 1e-6


def test_an_overconfident_model_strands_puzzles_and_the_table_shows_it():
    rows = load_test_set()[:48]
    res = decoding_state_reliability(PosteriorModel("llada", overconfidence=4.0), rows, "frechet", 0.25)
    assert res["failed"] > 0 and sum(res["failed_at_step"].values()) == res["failed"]
    assert any(r["confidence"] > r["posterior"] + 0.05 for r in res["committed"])


def test_training_state_reliability_of_the_exact_posterior_is_exact():
    table = training_state_reliability(PosteriorModel("dream"), 32)
    assert sum(r["n"] for r in table) > 0
    assert all(abs(r["confidence"] - r["posterior"]) < 1e-6 for r in table)


def test_reliability_bins():
    conf, true = np.array([0.55, 0.65, 0.995]), np.array([0.5, 0.5, 1.0])
    table = reliability(conf, true)
    assert [r["n"] for r in table] == [2, 1] and table[0]["posterior"] == 0.5
