"""Executables compiled ahead of time (daca_jax.parallel.aot): a learner given the serialized rollout and
update of its own programs runs them without compiling and gets what it gets compiling; anything else
(another program, another machine, a changed file) is one line and the usual compile.

As in a real run, the executables are loaded by another process than the one that compiled them (XLA:CPU
cannot load an executable into a process that already compiled the same program: "Function ... not found")."""
import json
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.parallel import aot
from daca_jax.rl.learner import GRPOLearner
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.rl import RLConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.config.train import TrainConfig
from tests.fixed_logit_model import jax_logits, make_params

V, MASK, EOS, P = 12, 10, 11, 3


def _cfg(lr=0.05):
  return TrainConfig(rollout=RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0),
                     likelihood=LikelihoodConfig(stratified=StratifiedConfig(num_strata=2)),
                     rl=RLConfig(credit="dps", likelihood="stratified", num_iterations=2, group_size=4, beta=0.1,
                                 learning_rate=lr, warmup_steps=0))


def _inputs():
  params = jax.tree.map(jnp.asarray, make_params(P + 8, V, seed=0, scale=1.0))
  prompts = jnp.asarray(np.random.default_rng(0).integers(0, 9, (8, P)), jnp.int32)
  rewards = jnp.asarray(np.random.default_rng(1).uniform(size=8), jnp.float32)
  return params, prompts, rewards


def _iteration(learner, params, prompts, rewards):
  traj = learner.rollout(params, prompts, jax.random.PRNGKey(0))
  weights = learner.credit_weights(traj)
  out = learner.update(params, learner.init_opt_state(params), params, traj, rewards, weights, jax.random.PRNGKey(1))
  return traj, out


def _compile_ahead(folder, cfg):
  """What train.py --compile_only writes: the learner's two programs compiled from shapes, serialized."""
  learner = GRPOLearner(jax_logits, cfg, mask_id=MASK, eos_id=EOS)
  params, prompts, rewards = _inputs()
  shapes = lambda t: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), t)
  lowered = learner.rollout.lower(shapes(params), shapes(prompts), shapes(jax.random.PRNGKey(0)))
  traj = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), lowered.out_info)
  weights = jax.eval_shape(learner.credit_weights, traj)
  upd = learner.update.lower(shapes(params), jax.eval_shape(learner.init_opt_state, params), shapes(params), traj,
                             shapes(rewards), weights, shapes(jax.random.PRNGKey(1)))
  with aot.fresh_compiles():  # as the preflight compiles: not from the suite's persistent compilation cache
    programs = {"rollout": (lowered.compile(), aot.fingerprint(lowered)),
                "update": (upd.compile(), aot.fingerprint(upd))}
  return aot.write(folder, programs, target="cpu:1")


def _preflight(tmp_path, cfg_kwargs=None):
  """:func:`_compile_ahead` in a process of its own, as train.py --compile_only is (with the test session's
  persistent compilation cache, which it bypasses: :func:`daca_jax.parallel.aot.fresh_compiles`)."""
  root = pathlib.Path(__file__).resolve().parents[2]
  folder = tmp_path / "executables"
  code = ("import sys\nfrom tests.parallel.test_aot import _cfg, _compile_ahead\n"
          f"_compile_ahead(sys.argv[1], _cfg(**{cfg_kwargs or {}!r}))\n")
  r = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, cwd=root,
                     env=dict(os.environ, PYTHONPATH=str(root)), timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  return folder


_RUN = """
import json, sys
import jax, numpy as np
from daca_jax.parallel import aot
from daca_jax.rl.learner import GRPOLearner
from tests.parallel.test_aot import EOS, MASK, _cfg, _inputs, _iteration, jax_logits
folder, out = sys.argv[1], sys.argv[2]
reports = []
for lr in map(float, sys.argv[3:]):
  lines = []
  learner = GRPOLearner(jax_logits, _cfg(lr=lr), mask_id=MASK, eos_id=EOS)
  offered = aot.attach(folder, learner.aot_slots, lines.append)
  leaves = jax.tree.leaves(_iteration(learner, *_inputs()))
  np.savez(f"{out}_{lr}.npz", *[np.asarray(x) for x in leaves])
  reports.append({"offered": offered, "lines": lines,
                  "loaded": {k: s.executable is not None for k, s in learner.aot_slots.items()}})
print(json.dumps(reports))
"""


def _run(folder, lrs, tmp_path):
  """The loaded learners' iterations (one per learning rate) in a process of their own: [(report, output
  leaves)]."""
  root = pathlib.Path(__file__).resolve().parents[2]
  out = tmp_path / "out"
  r = subprocess.run([sys.executable, "-c", _RUN, str(folder), str(out), *map(str, lrs)], capture_output=True,
                     text=True, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  results = []
  for lr, report in zip(lrs, json.loads(r.stdout.strip().splitlines()[-1])):
    with np.load(f"{out}_{float(lr)}.npz") as z:
      results.append((report, [z[f"arr_{i}"] for i in range(len(z.files))]))
  return results


def test_a_learner_runs_its_preflights_executables_and_gets_the_same_results(tmp_path):
  folder = _preflight(tmp_path)
  manifest = json.loads((folder / aot.MANIFEST).read_text())
  assert manifest["platform"] == "cpu" and manifest["num_devices"] == 1 and set(manifest["programs"]) == {
      "rollout", "update"}
  (report, got), (other, got_other) = _run(folder, (0.05, 0.01), tmp_path)
  assert report == {"offered": True, "loaded": {"rollout": True, "update": True},
                    "lines": ["rollout: running the executable compiled ahead of time (no compile)",
                              "update: running the executable compiled ahead of time (no compile)"]}
  want = jax.tree.leaves(_iteration(GRPOLearner(jax_logits, _cfg(), mask_id=MASK, eos_id=EOS), *_inputs()))
  assert len(got) == len(want)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a, np.asarray(b))
  # another learning rate: the update's lowering differs (the rollout's does not), so it compiles as usual
  assert other["loaded"] == {"rollout": True, "update": False}
  assert other["lines"][1] == ("update: the executable compiled ahead of time is of another program (config, "
                               "shapes or library code differ): compiling as usual")
  want = jax.tree.leaves(_iteration(GRPOLearner(jax_logits, _cfg(lr=0.01), mask_id=MASK, eos_id=EOS), *_inputs()))
  for a, b in zip(got_other, want):
    np.testing.assert_array_equal(a, np.asarray(b))


def test_another_machine_or_file_is_one_line(tmp_path):
  folder = _preflight(tmp_path)
  # another machine: nothing is offered
  manifest = json.loads((folder / aot.MANIFEST).read_text())
  (folder / aot.MANIFEST).write_text(json.dumps(dict(manifest, device_kind="TPU v5", target="tpu:v5p-8")))
  lines = []
  assert not aot.attach(folder, GRPOLearner(jax_logits, _cfg(), mask_id=MASK, eos_id=EOS).aot_slots, lines.append)
  assert lines == [f"executables in {folder}: compiled for tpu:v5p-8 (device_kind 'TPU v5'); this machine has "
                   "device_kind 'cpu': compiling as usual"]
  # a file that is not the one the manifest names; a manifest that is not JSON
  (folder / aot.MANIFEST).write_text(json.dumps(manifest))
  (folder / "update.xla").write_bytes(b"not an executable")
  lines, learner = [], GRPOLearner(jax_logits, _cfg(), mask_id=MASK, eos_id=EOS)
  assert aot.attach(folder, learner.aot_slots, lines.append)
  assert lines == [f"executables in {folder}: update: update.xla is not the file the manifest names: compiling "
                   "update as usual"]
  (folder / aot.MANIFEST).write_text("{")
  lines = []
  assert not aot.attach(folder, learner.aot_slots, lines.append)
  assert lines[0].startswith(f"executables in {folder}: unreadable manifest")
  # hostile manifests and files: one line each, nothing outside the folder read, no traceback
  (tmp_path / "outside.xla").write_bytes(b"x")
  for programs, says in [(None, "its 'programs' is not an object"), ([1, 2], "its 'programs' is not an object"),
                         ("rollout", "its 'programs' is not an object"),
                         ({"update": {"file": "../outside.xla"}}, "names no file of its own folder"),
                         ({"update": {"file": str(tmp_path / "outside.xla")}}, "names no file of its own folder"),
                         ({"update": {"file": "a" * 5000}}, "names no file of its own folder"),
                         ({"update": {"file": 7}}, "names no file of its own folder"),
                         ({"update": {"file": "missing.xla"}}, "missing.xla is not a file there"),
                         ({"update": "update.xla"}, "names no file of its own folder")]:
    (folder / aot.MANIFEST).write_text(json.dumps(dict(manifest, programs=programs)))
    lines = []
    assert not aot.attach(folder, learner.aot_slots, lines.append)
    assert says in lines[-1] and len(lines) == (2 if isinstance(programs, dict) else 1), (programs, lines)
  for text in ("[" * 100_000 + "]" * 100_000, "[]", "null", "\xff"):
    (folder / aot.MANIFEST).write_text(text)
    lines = []
    assert not aot.attach(folder, learner.aot_slots, lines.append) and len(lines) == 1
  assert all(s.executable is None for s in learner.aot_slots.values())


_SLOT = """
import json, sys
import jax, jax.numpy as jnp
from daca_jax.parallel import aot
f = jax.jit(lambda x, total_rows=0: x * 2.0 + total_rows, static_argnames=("total_rows",))
slot, lines = aot.Slot("rollout", static=("total_rows",)), []
slot.offer(open(sys.argv[1], "rb").read(), sys.argv[2], lines.append)
out = [float(slot.run(f, jnp.ones(4), total_rows=3)[0]), slot.executable is not None]
out += [float(slot.run(f, jnp.ones(8), total_rows=3)[0]), float(slot.run(f, jnp.ones(4), total_rows=5)[0])]
print(json.dumps([out, lines]))
"""


def test_a_loaded_executable_runs_only_for_the_arguments_it_was_compiled_for(tmp_path):
  """Later calls with other shapes or static values compile as usual (they used to run the stale program
  or raise)."""
  import jax.numpy as jnp
  from jax.experimental import serialize_executable

  f = jax.jit(lambda x, total_rows=0: x * 2.0 + total_rows, static_argnames=("total_rows",))
  lowered = f.lower(jnp.ones(4), total_rows=3)
  with aot.fresh_compiles():  # not an executable loaded from the session's compilation cache
    payload, _, _ = serialize_executable.serialize(lowered.compile())
  (tmp_path / "p.xla").write_bytes(payload)
  root = pathlib.Path(__file__).resolve().parents[2]
  r = subprocess.run([sys.executable, "-c", _SLOT, str(tmp_path / "p.xla"), aot.fingerprint(lowered)],
                     capture_output=True, text=True, cwd=root, env=dict(os.environ, PYTHONPATH=str(root)), timeout=120)
  assert r.returncode == 0, r.stderr[-3000:]
  out, lines = json.loads(r.stdout.strip().splitlines()[-1])
  assert out == [5.0, True, 5.0, 7.0]
  assert lines == ["rollout: running the executable compiled ahead of time (no compile)"]


def test_fresh_compiles_bypass_the_persistent_cache_and_restore_it(tmp_path, monkeypatch):
  """An executable serialized after a cache hit fails to run elsewhere (XLA:CPU); inside fresh_compiles the
  cache is neither read nor written, and it is on again after."""
  from jax._src import compilation_cache as cc

  hits = []
  monkeypatch.setattr(cc, "get_executable_and_time", lambda *a, **k: hits.append(a) or (None, None))
  f = jax.jit(lambda x: x * 3.0 + 1.0)
  with aot.fresh_compiles():
    f.lower(jax.numpy.ones(5)).compile()
  assert hits == [] and jax.config.jax_enable_compilation_cache
  jax.jit(lambda x: x * 7.0 + 2.0).lower(jax.numpy.ones(5)).compile()  # the session's cache, read again
  assert hits
