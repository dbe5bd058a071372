"""The "Using single functions" guide's example (docs/using_functions.md), run as it stands (the block after its marker), and
checked against the library's own step: its gradient is GRPOLearner.objective_grad's for the same
rollout, rewards, weights and likelihood key, and its update moves the parameters."""
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

README = pathlib.Path(__file__).resolve().parent.parent / "docs" / "using_functions.md"
MARKER = "<!-- example: single-functions -->"


def example_code() -> str:
  """The python block right after MARKER in docs/using_functions.md."""
  text = README.read_text(encoding="utf-8")
  assert MARKER in text, f"{README} lost its marker {MARKER!r}"
  m = re.match(r"\s*```python\n(.*?)\n```", text.split(MARKER, 1)[1], re.S)
  assert m, "the marker must be followed by a ```python block"
  return m.group(1)


def test_readme_single_functions_example_runs_and_matches_the_learner():
  ns: dict = {"__name__": "readme_example"}
  exec(compile(example_code(), str(README), "exec"), ns)  # the docs are trusted code

  traj, rewards, w, loss = ns["traj"], ns["rewards"], ns["w"], ns["loss"]
  b, length = traj.completion_mask.shape
  assert b == 2 * ns["G"] and length == ns["roll_cfg"].gen_length and rewards.shape == (b,)
  assert bool(traj.finished) and not bool(jnp.any(traj.completion == ns["MASK"]))
  assert np.isfinite(float(loss))
  moved = jax.tree.map(lambda a, c: float(jnp.max(jnp.abs(a - c))), ns["params"], ns["old_params"])
  assert max(jax.tree.leaves(moved)) > 0  # the optax update changed θ

  # The example's hand-assembled step is the learner's step. A random model's rewards usually all tie
  # (A = 0, and at θ = θ_ref the KL gradient is 0 too), so the comparison also runs the example's own
  # grad_fn with rewards that do not tie.
  from daca_jax.rl.advantages import group_advantages
  from daca_jax.rl.learner import GRPOLearner
  from daca_jax.config.likelihood import LikelihoodConfig
  from daca_jax.config.rl import RLConfig
  from daca_jax.config.train import TrainConfig

  cfg = TrainConfig(rollout=ns["roll_cfg"], likelihood=LikelihoodConfig(stratified=ns["sml"]),
                    rl=RLConfig(credit="dps", likelihood="stratified", group_size=ns["G"], prompts_per_step=2,
                                clip_eps=ns["clip_eps"], beta=ns["beta"], grad_agreement=False)).validate()
  learner = GRPOLearner(ns["logits_fn"], cfg, mask_id=ns["MASK"], eos_id=ns["EOS"])
  theta = ns["old_params"]
  objective_grad = jax.jit(learner.objective_grad)
  grads, aux = objective_grad(theta, ns["ref_params"], traj, rewards, w, ns["k_lik"])
  np.testing.assert_allclose(float(aux["loss"]), float(loss), rtol=1e-6, atol=1e-7)
  for got, want in zip(jax.tree.leaves(ns["grads"]), jax.tree.leaves(grads)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-7)
  spread = jnp.linspace(0.0, 1.0, b)
  (loss2, _), grads2 = ns["grad_fn"](theta, group_advantages(spread, ns["G"]))
  want2, aux2 = objective_grad(theta, ns["ref_params"], traj, spread, w, ns["k_lik"])
  np.testing.assert_allclose(float(aux2["loss"]), float(loss2), rtol=1e-6, atol=1e-7)
  for got, want in zip(jax.tree.leaves(grads2), jax.tree.leaves(want2)):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-7)
  assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(want2)) > 1e-6  # a real gradient
