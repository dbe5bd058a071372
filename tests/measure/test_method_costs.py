"""Method costs measured from XLA's compiled FLOPs: the record-based credits add no forward pass, and
each likelihood costs its number of passes (SML K bodies and one head, RLDF k, trajectory S)."""
import dataclasses

import pytest

from configs import sudoku_tiny
from daca_jax.measure import method_costs as mc
from daca_jax.measure.benchmarking import forward_flops
from daca_jax.config.configure import train_config_from_dict
from daca_jax.likelihood.rldf import RLDFConfig
from daca_jax.likelihood.stratified import StratifiedConfig


@pytest.mark.parametrize("all_methods", [False, pytest.param(True, marks=pytest.mark.slow)])  # all: 25 s
def test_measured_passes_match_each_method(all_methods):
  cfg = train_config_from_dict(sudoku_tiny.get_config("smoke"))
  # Two layers: a scanned layer stack would count once in XLA's cost analysis and skew every ratio.
  cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, n_layers=2),
                            likelihood=dataclasses.replace(cfg.likelihood, stratified=StratifiedConfig(num_strata=4),
                                                          rldf=RLDFConfig(states=2)))
  # SML runs the transformer body K times but the output head only on the ⌈L/K⌉ positions each pass
  # scores: K·(1 - h) + h·K⌈L/K⌉/T passes, h = the head's share of a forward pass (40% at this size).
  m, length, k = cfg.model, cfg.rollout.gen_length, 4
  total = 17 + length  # measure() uses 17-token prompts
  head = 2 * m.d_model * m.vocab_size * total / forward_flops(m, 1, total)
  sml = k * (1 - head) + head * k * -(-length // k) / total
  want_passes = {"d1 (diffu-GRPO)": 1, "DACA-GRPO (DPS + SML)": sml, "DelTA": 1, "RLDF": 2}
  if not all_methods:  # the library's own method and d1's
    want_passes = {k: v for k, v in want_passes.items() if k in ("d1 (diffu-GRPO)", "DACA-GRPO (DPS + SML)")}
  methods = [m for m in mc.DEFAULT_METHODS if m.label in want_passes]
  rows = {r["label"]: r for r in mc.measure(cfg, methods, batch_prompts=2, timed=False)}
  for label, passes in want_passes.items():
    assert rows[label]["likelihood_passes"] == pytest.approx(passes, rel=0.04), label
    # DPS and DelTA read the sampler's own logits / hidden states: no extra forward pass.
    assert rows[label]["rollout_flops_ratio"] == pytest.approx(1.0, abs=0.02), label
  assert rows["d1 (diffu-GRPO)"]["update_flops_ratio"] == 1.0
  assert rows["DACA-GRPO (DPS + SML)"]["update_flops_ratio"] == pytest.approx(sml, rel=0.05)
  assert ("| RLDF |" in mc.markdown(list(rows.values()))) == all_methods
