"""docs/adding_a_method.md stays true: its example method, added to a copy of the package exactly as the
page says (its file, and its line in the list), is an ``rl.objective`` that configs accept and the learner
trains, with the loss the page states."""
from __future__ import annotations

import filecmp
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "adding_a_method.md"


def _blocks(kind: str) -> list[str]:
  return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def _apply(diff: str, text: str) -> str:
  """Each run of ``-`` lines of ``diff`` replaced in ``text`` by the ``+`` lines that follow it."""
  lines = diff.rstrip("\n").split("\n")
  i = 0
  while i < len(lines):
    old, new = [], []
    while i < len(lines) and lines[i].startswith("-"):
      old.append(lines[i][1:])
      i += 1
    while i < len(lines) and lines[i].startswith("+"):
      new.append(lines[i][1:])
      i += 1
    if not old:
      raise AssertionError(f"the page's diff has a line that is no removal: {lines[i]!r}")
    before = "\n".join(old) + "\n"
    assert text.count(before) == 1, f"the page's diff does not match the list: {before!r}"
    text = text.replace(before, "\n".join(new) + "\n")
  return text


SCRIPT = r"""
import dataclasses, jax, jax.numpy as jnp, numpy as np
import daca_jax
from daca_jax.config import configure
from daca_jax.config.credit import CreditConfig
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from daca_jax.contracts import PolicyBatch
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.rl.advantages import group_advantages
from daca_jax.rl.methods import METHODS, OBJECTIVES, method
from tests.fixed_logit_model import jax_logits, learner_rollout

assert daca_jax.__file__.startswith(COPY), daca_jax.__file__
assert "reinforce" in OBJECTIVES.names() and METHODS[-1] is method("reinforce")
rollout = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
rl = RLConfig(objective="reinforce", credit="uniform", likelihood="stratified", group_size=4, beta=0.1,
              learning_rate=0.05, warmup_steps=0, grad_agreement=False)
cfg = configure.validate(TrainConfig(rollout=rollout, credit=CreditConfig(),
                                     likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2)), rl=rl))
# its traits reach the checks: per-token credit and per-pass accumulation accepted
configure.validate(dataclasses.replace(cfg, rl=dataclasses.replace(rl, credit="position_value")))
configure.validate(dataclasses.replace(cfg, rl=dataclasses.replace(rl, pass_accum=True)),)
P, MASK, EOS = 3, 10, 11
params, learner, traj, rewards, weights = learner_rollout(cfg, 12, MASK, EOS, P)
key = jax.random.PRNGKey(42)
new, _, metrics = learner.update(params, learner.init_opt_state(params), params, traj, rewards, weights, key)
# the page's loss by hand, on the learner's likelihood draw (μ = 1: its first key)
logp = LIKELIHOOD.get("stratified")(jax_logits, params, traj.tokens, P, jax.random.fold_in(key, 0), cfg.likelihood,
                                    mask_id=MASK, commit_step=traj.commit_step).logp
m, a = np.asarray(traj.completion_mask), np.asarray(group_advantages(rewards, 4))
expected = -np.sum(m * a[:, None] * np.asarray(weights) * np.asarray(logp)) / m.sum()  # KL 0: reference = policy
np.testing.assert_allclose(float(metrics["loss"]), expected, rtol=1e-4, atol=1e-6)
assert any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(new), jax.tree.leaves(params)))
print("trained")
"""


def test_the_documented_method_trains_after_the_documented_changes(tmp_path):
  (code,), (diff,) = _blocks("python"), _blocks("diff")
  copy = tmp_path / "daca_jax"
  shutil.copytree(ROOT / "daca_jax", copy, ignore=shutil.ignore_patterns("__pycache__"))
  (copy / "rl" / "methods" / "reinforce.py").write_text(code, encoding="utf-8")
  listing = copy / "rl" / "methods" / "__init__.py"
  listing.write_text(_apply(diff, listing.read_text(encoding="utf-8")), encoding="utf-8")

  changed = []

  def walk(cmp: filecmp.dircmp, where: str) -> None:
    changed.extend(f"{where}{n}" for n in cmp.diff_files + cmp.left_only + cmp.right_only if n != "__pycache__")
    for name, sub in cmp.subdirs.items():
      walk(sub, f"{where}{name}/")

  walk(filecmp.dircmp(ROOT / "daca_jax", copy), "")
  assert sorted(changed) == ["rl/methods/__init__.py", "rl/methods/reinforce.py"]

  env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "JAX_PLATFORMS": "cpu"}
  out = subprocess.run([sys.executable, "-c", f"COPY = {str(copy)!r}\n" + SCRIPT], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=600)
  assert out.returncode == 0 and "trained" in out.stdout, out.stderr[-3000:]
