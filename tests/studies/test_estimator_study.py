"""The estimator study's machinery on a fixed-logit model (fast): deterministic estimators have zero
spread, errors are measured against the exact value, and the table/plot are written."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.errors import DataError
from daca_jax.studies import estimator_study as es
from daca_jax.likelihood import LIKELIHOOD, any_order_logprob
from tests.fixed_logit_model import jax_logits, make_params

V, MASK, P, L, B = 6, 5, 2, 4, 3


_CHECKED = ("mean_field", "stratified K=2", "stratified K=4 (=L, pseudo-likelihood)",
            "trajectory (S=L, sampler's order)")


@pytest.mark.parametrize("only_checked", [True, pytest.param(False, marks=pytest.mark.slow)])  # all: 22 s
def test_study_rows(tmp_path, only_checked):
  params = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=1, scale=1.0))
  tokens = jnp.asarray(np.random.default_rng(0).integers(0, 5, (B, P + L)), jnp.int32)
  specs = [s for s in es.default_specs(L) if s.label in _CHECKED or not only_checked]
  commit_step = jnp.asarray(np.stack([np.random.default_rng(i).permutation(L) for i in range(B)]), jnp.int32)
  rows = es.study(jax_logits, params, tokens, P, MASK, specs, draws=3, commit_step=commit_step)
  by = {r["label"]: r for r in rows}
  assert [r["label"] for r in rows] == [s.label for s in specs]
  # the oracles compiled, as the study's estimates (op by op was slower on a loaded machine)
  exact = float(np.mean(jax.jit(lambda prm: any_order_logprob(jax_logits, prm, tokens, P, mask_id=MASK))(params)))
  for r in rows:
    assert np.isfinite([r["bias"], r["std"], r["rmse"]]).all() and -1 <= r["grad_cosine"] <= 1
    assert r["rmse"] >= abs(r["bias"]) - 1e-6
    np.testing.assert_allclose(r["exact_mean"], exact, rtol=1e-6)
  assert by["mean_field"]["std"] == 0.0 and by["stratified K=4 (=L, pseudo-likelihood)"]["std"] == 0.0
  assert by["stratified K=2"]["std"] > 0.0
  traj = by["trajectory (S=L, sampler's order)"]
  spec = specs[[sp.name for sp in specs].index("trajectory")]
  direct = jax.jit(lambda prm: LIKELIHOOD.get("trajectory")(jax_logits, prm, tokens, P, jax.random.PRNGKey(0), spec.cfg,
                                                            mask_id=MASK, commit_step=commit_step).logp)(params)
  assert traj["std"] == 0.0 and traj["passes"] == L
  np.testing.assert_allclose(traj["bias"], float(jnp.mean(jnp.sum(direct, -1))) - exact, rtol=1e-5, atol=1e-5)
  es.plot(rows, str(tmp_path / "s.png"))
  assert (tmp_path / "s.png").stat().st_size > 1000
  assert es.markdown_table(rows).count("\n") == len(rows) + 1


def test_read_results_takes_the_studys_own_file_or_rows_with_provenance(tmp_path):
  rows = [{"label": "mean_field", "passes": 1, "bias": -0.09, "std": 0.0, "rmse": 0.284, "grad_cosine": 0.777,
           "exact_mean": -3.0}]
  own, kept = tmp_path / "estimator_study.json", tmp_path / "kept.json"
  own.write_text(json.dumps(rows))
  kept.write_text(json.dumps({"what": "w", "rows": rows}))
  assert es.read_results(own) == es.read_results(kept) == rows
  assert es.markdown_table(rows).splitlines()[2] == "| mean_field | 1 | -0.090 | 0.000 | 0.284 | 0.777 |"
  kept.write_text(json.dumps({"rows": [{"label": "x", "passes": 1}]}))
  with pytest.raises(DataError, match=r"rows\[0\] lacks \['bias', 'std', 'rmse', 'grad_cosine'\]"):
    es.read_results(kept)
  kept.write_text(json.dumps({"what": "no rows"}))
  with pytest.raises(DataError, match="not an estimator study's results"):
    es.read_results(kept)
