"""diffu-GRPO loss and gradient vs a numpy reference and finite differences; group advantages."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.contracts import PolicyBatch
from daca_jax.rl.advantages import ADVANTAGES, group_advantages, zero_std_group_fraction
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.config.rl import RLConfig

B, L = 6, 5


def _batch(seed=0):
  rng = np.random.default_rng(seed)
  logp = np.log(rng.uniform(0.05, 0.95, (B, L)))
  batch = dict(logp_old=logp + rng.normal(0, 0.4, (B, L)), logp_ref=logp + rng.normal(0, 0.3, (B, L)),
               advantages=rng.normal(0, 1, B), weights=rng.uniform(0.5, 2.0, (B, L)),
               mask=(rng.uniform(size=(B, L)) > 0.25).astype(np.float64))
  return logp, batch


def fd_grad(ref, logp, b, eps, beta, h=1e-6):
  """Central finite differences of a numpy loss with respect to every logp entry."""
  fd = np.zeros_like(logp)
  for idx in np.ndindex(*logp.shape):
    e = np.zeros_like(logp)
    e[idx] = h
    fd[idx] = (ref(logp + e, b, eps, beta) - ref(logp - e, b, eps, beta)) / (2 * h)
  return fd


def np_diffu_grpo(logp, b, eps, beta):
  ratio = np.exp(logp - b["logp_old"])
  adv = b["advantages"][:, None] * b["weights"]
  pg = -np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv)
  r = b["logp_ref"] - logp
  kl = np.exp(r) - r - 1
  return ((pg + beta * kl) * b["mask"]).sum() / b["mask"].sum()


@pytest.mark.parametrize("eps,beta", [(0.5, 0.04), (0.2, 0.0), (0.1, 0.5)])
def test_diffu_grpo_loss_and_grad(eps, beta):
  logp, b = _batch()
  cfg = RLConfig(clip_eps=eps, beta=beta)
  with jax.enable_x64(True):
    pb = PolicyBatch(**{k: jnp.asarray(v) for k, v in b.items()})
    fn = lambda lp: OBJECTIVES.get("diffu_grpo")(lp, pb, cfg)[0]
    loss = float(fn(jnp.asarray(logp)))
    grad = np.asarray(jax.grad(fn)(jnp.asarray(logp)))
  np.testing.assert_allclose(loss, np_diffu_grpo(logp, b, eps, beta), rtol=1e-12)
  fd = fd_grad(np_diffu_grpo, logp, b, eps, beta)
  np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)
  assert (grad[b["mask"] == 0] == 0).all()


def test_diffu_grpo_at_ratio_one_is_weighted_advantage():
  """With θ = θ_old = θ_ref the loss is −Σ m·w·A / Σ m and d loss / d logp = −m·w·A / Σ m."""
  logp, b = _batch(1)
  b["logp_old"] = b["logp_ref"] = logp
  pb = PolicyBatch(**{k: jnp.asarray(v, jnp.float32) for k, v in b.items()})
  fn = lambda lp: OBJECTIVES.get("diffu_grpo")(lp, pb, RLConfig())[0]
  expect = -(b["mask"] * b["weights"] * b["advantages"][:, None]).sum() / b["mask"].sum()
  np.testing.assert_allclose(float(fn(jnp.asarray(logp, jnp.float32))), expect, rtol=1e-5)
  g = np.asarray(jax.grad(fn)(jnp.asarray(logp, jnp.float32)))
  np.testing.assert_allclose(g, -(b["mask"] * b["weights"] * b["advantages"][:, None]) / b["mask"].sum(),
                             rtol=1e-5, atol=1e-7)


def test_clip_fraction_and_kl_aux():
  logp, b = _batch(2)
  pb = PolicyBatch(**{k: jnp.asarray(v, jnp.float32) for k, v in b.items()})
  _, aux = OBJECTIVES.get("diffu_grpo")(jnp.asarray(logp, jnp.float32), pb, RLConfig(clip_eps=0.2))
  ratio = np.exp(logp - b["logp_old"])
  adv = b["advantages"][:, None] * b["weights"]
  clipped = np.clip(ratio, 0.8, 1.2) * adv < ratio * adv
  np.testing.assert_allclose(float(aux["clip_frac"]), (clipped * b["mask"]).sum() / b["mask"].sum(), rtol=1e-5)
  r = b["logp_ref"] - logp
  np.testing.assert_allclose(float(aux["kl"]), ((np.exp(r) - r - 1) * b["mask"]).sum() / b["mask"].sum(),
                             rtol=1e-5)


@pytest.mark.parametrize("normalize", [False, True])
def test_group_advantages(normalize):
  r = np.random.default_rng(0).uniform(size=12).astype(np.float32)
  a = np.asarray(group_advantages(jnp.asarray(r), 4, normalize))
  g = r.reshape(3, 4)
  expect = g - g.mean(1, keepdims=True)
  if normalize:
    expect = expect / (g.std(1, keepdims=True) + 1e-4)
  np.testing.assert_allclose(a, expect.reshape(-1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(a.reshape(3, 4).sum(1), 0, atol=1e-5)


def test_group_advantages_rejects_ragged_batch():
  with pytest.raises(ValueError, match="group_size"):
    group_advantages(jnp.zeros(10), 4)


def test_zero_std_group_fraction():
  r = jnp.array([1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
  assert float(zero_std_group_fraction(r, 2)) == pytest.approx(2 / 3)


# ---- wd1, GSPO/GDPO, REINFORCE++ vs numpy references --------------------------------------------

G = 3  # groups of 3 in the B = 6 batch


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def np_wd1(logp, b, eps, beta):
  seq = (b["mask"] * b["weights"] * logp).sum(-1).reshape(-1, G)
  adv = b["advantages"].reshape(-1, G)
  pg = ((_softmax(-adv) - _softmax(adv)) * seq).sum(-1).mean()
  r = b["logp_ref"] - logp
  kl = ((np.exp(r) - r - 1) * b["mask"]).sum() / b["mask"].sum()
  return pg + beta * kl


def np_sequence_clip(logp, b, eps, beta):
  m = b["mask"]
  s = np.exp((m * b["weights"] * (logp - b["logp_old"])).sum(-1) / m.sum(-1))
  a = b["advantages"]
  pg = (-np.minimum(s * a, np.clip(s, 1 - eps, 1 + eps) * a)).mean()
  r = b["logp_ref"] - logp
  kl = ((np.exp(r) - r - 1) * m).sum() / m.sum()
  return pg + beta * kl


def np_reinforce_pp(logp, b, eps, beta):
  m = b["mask"]
  shaped = b["rewards"] - beta * (m * (b["logp_old"] - b["logp_ref"])).sum(-1)
  adv = (shaped - shaped.mean()) / (shaped.std() + 1e-8)
  ratio = np.exp(logp - b["logp_old"])
  a = adv[:, None] * b["weights"]
  return ((-np.minimum(ratio * a, np.clip(ratio, 1 - eps, 1 + eps) * a)) * m).sum() / m.sum()


@pytest.mark.parametrize("name,ref", [("wd1", np_wd1), ("gspo", np_sequence_clip), ("gdpo", np_sequence_clip),
                                      ("reinforce_pp", np_reinforce_pp)])
@pytest.mark.parametrize("eps,beta", [(0.2, 0.0), (0.3, 0.1)])
def test_objective_loss_and_grad_vs_numpy(name, ref, eps, beta):
  logp, b = _batch(3)
  b["mask"][:, 0] = 1.0  # every sequence has at least one valid token
  b["rewards"] = np.random.default_rng(4).uniform(size=B)
  cfg = RLConfig(clip_eps=eps, beta=beta, group_size=G)
  with jax.enable_x64(True):
    pb = PolicyBatch(**{k: jnp.asarray(v) for k, v in b.items()})
    if name == "reinforce_pp":  # REINFORCE++'s advantages come from its estimator (rl.advantage)
      kl_seq = jnp.sum(pb.mask * (pb.logp_old - pb.logp_ref), -1)
      pb = pb.replace(advantages=ADVANTAGES.get("reinforce_pp")(pb.rewards, G, kl_seq, beta))
    fn = lambda lp: OBJECTIVES.get(name)(lp, pb, cfg)[0]
    loss = float(fn(jnp.asarray(logp)))
    grad = np.asarray(jax.grad(fn)(jnp.asarray(logp)))
  np.testing.assert_allclose(loss, ref(logp, b, eps, beta), rtol=1e-10)
  fd = fd_grad(ref, logp, b, eps, beta)
  np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-8)
  assert np.abs(grad).max() > 0


def test_wd1_pushes_up_the_best_and_down_the_worst():
  logp = np.log(np.full((B, L), 0.5))
  _, b = _batch(5)
  b["mask"][:] = 1.0
  b["weights"][:] = 1.0
  b["advantages"] = np.array([1.0, 0.0, -1.0, 0.5, -0.5, 0.0])
  pb = PolicyBatch(**{k: jnp.asarray(v, jnp.float32) for k, v in b.items()})
  g = np.asarray(jax.grad(lambda lp: OBJECTIVES.get("wd1")(lp, pb, RLConfig(group_size=G, beta=0.0))[0])(
      jnp.asarray(logp, jnp.float32)))
  assert (g[0] < 0).all() and (g[2] > 0).all()  # descent raises logp of the best, lowers the worst


def test_reinforce_pp_advantages_require_the_kl():
  with pytest.raises(ValueError, match="kl_seq"):
    ADVANTAGES.get("reinforce_pp")(jnp.ones(6), G)


def test_clipped_surrogate_passes_the_full_gradient_where_the_clip_does_not_take_over():
  """The references' semantics (PyTorch: clamp passes the gradient on its closed interval, min splits a tie):
  at ρ = 1 with ε = 0 the gradient is A, not the 0.625 A of jnp.clip + jnp.minimum; at the interval's
  boundary A; where the clip takes over 0; values those of min(ρA, clip(ρ)A)."""
  import jax
  import jax.numpy as jnp

  from daca_jax.rl.methods.base import clipped_surrogate

  grad = lambda r, a, eps, high=None: float(jax.grad(lambda x: clipped_surrogate(x, a, eps, high)[0])(r))
  naive = lambda r, a, eps: float(jax.grad(lambda x: jnp.minimum(x * a, jnp.clip(x, 1 - eps, 1 + eps) * a))(r))
  assert naive(1.0, 2.0, 0.0) == pytest.approx(0.625 * 2.0)  # what the plain jnp form gave
  for a in (2.0, -3.0):
    assert grad(1.0, a, 0.0) == pytest.approx(a)  # ratio 1, no clip room: the full gradient
    assert grad(1.0, a, 0.2) == pytest.approx(a)
  assert grad(1.2, 2.0, 0.2) == pytest.approx(2.0)  # on the upper boundary, A > 0: the clip has not taken over
  assert grad(1.5, 2.0, 0.2) == 0.0 and grad(0.5, -2.0, 0.2) == 0.0  # the clip took over
  assert grad(1.5, -2.0, 0.2) == pytest.approx(-2.0) and grad(0.5, 2.0, 0.2) == pytest.approx(2.0)
  assert grad(1.3, 2.0, 0.1, 0.3) == pytest.approx(2.0) and grad(1.31, 2.0, 0.1, 0.3) == 0.0  # asymmetric
  ratios = jnp.linspace(0.3, 1.7, 29)
  for a, eps in ((1.5, 0.2), (-0.7, 0.0), (0.4, 0.5)):
    got, binding = clipped_surrogate(ratios, a, eps)
    want = jnp.minimum(ratios * a, jnp.clip(ratios, 1 - eps, 1 + eps) * a)
    assert jnp.allclose(got, want) and bool(jnp.all(binding == (jnp.clip(ratios, 1 - eps, 1 + eps) * a < ratios * a)))
