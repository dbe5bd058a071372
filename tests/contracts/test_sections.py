"""Every registered algorithm sees only its own part of the config (issue: per-method sections).

Estimators, credit assigners and objectives declare the config fields they read as keyword-only
parameters; their registry entries hand them exactly those. These tests pin what each one reads, so
a method that starts reading another method's options (or a whole section again) fails here.
"""
import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.credit import CREDIT
from daca_jax.credit.dps import dps_credit
from daca_jax.likelihood import LIKELIHOOD
from daca_jax.likelihood.stratified import stratified_logprobs
from daca_jax.rl.methods import OBJECTIVES
from daca_jax.rl.methods.diffu_grpo import diffu_grpo_loss
from daca_jax.contracts import PolicyBatch
from daca_jax.config.likelihood import LikelihoodConfig
from daca_jax.likelihood.coupled import CoupledConfig
from daca_jax.likelihood.stratified import StratifiedConfig
from daca_jax.config.credit import CreditConfig
from daca_jax.credit.delta import DeltaConfig
from daca_jax.credit.dps import DPSConfig
from daca_jax.credit.dtca import DTCAConfig
from daca_jax.config.rl import RLConfig
from daca_jax.rl.methods.rldf import RLDFLossConfig
from daca_jax.config.rollout import RolloutConfig
from daca_jax.diffusion import make_rollout_fn
from tests.fixed_logit_model import jax_logits, make_params

SHARED = {"p_mask_prompt", "strata_batch", "trajectory_steps"}
ESTIMATOR_READS = {
    "mean_field": {"p_mask_prompt"},
    "stratified": {"stratified", "p_mask_prompt", "strata_batch"},
    "coupled": {"coupled", "p_mask_prompt"},
    "elbo": {"elbo", "p_mask_prompt"},
    "trajectory": {"trajectory", "trajectory_steps", "p_mask_prompt", "strata_batch"},
    "rldf": {"rldf", "trajectory_steps", "p_mask_prompt", "strata_batch"},
    "spg_block": {"spg_block", "p_mask_prompt", "strata_batch"},
    "espo_elbo": {"espo_elbo", "p_mask_prompt", "strata_batch"},
    "elbo_mc": {"elbo_mc", "p_mask_prompt", "strata_batch"},
    "stepmerge": {"stepmerge", "trajectory_steps", "strata_batch"},
}
CREDIT_READS = {"uniform": set(), "dps": {"dps"}, "dtca": {"dtca", "dps"}, "delta": {"delta"},
                "position_value": {"position_value", "dps"}, "token_reward": set(), "contrast": {"contrast", "dps"}}
OBJECTIVE_READS = {"diffu_grpo": {"clip_eps", "beta"}, "wd1": {"group_size", "beta"},
                   "gspo": {"clip_eps", "beta"}, "gdpo": {"clip_eps", "beta"},
                   "reinforce_pp": {"clip_eps"}, "rldf": {"clip_eps", "beta", "rldf"},
                   "spg": {"spg"}, "espo": {"clip_eps", "beta"}, "bgpo": {"clip_eps", "beta"},
                   "map": {"clip_eps", "beta", "map"}}


def test_every_registered_algorithm_reads_only_its_own_fields():
  assert {n: set(LIKELIHOOD.get(n).reads) for n in LIKELIHOOD.names()} == ESTIMATOR_READS
  assert {n: set(CREDIT.get(n).reads) for n in CREDIT.names()} == CREDIT_READS
  assert {n: set(OBJECTIVES.get(n).reads) for n in OBJECTIVES.names()} == OBJECTIVE_READS
  # A method-specific section is read by its own method only (DTCA builds on DPS's scores).
  sections = {f.name for f in dataclasses.fields(LikelihoodConfig)} - SHARED - {"elbo_terms"}
  for section in sections:
    assert [n for n, r in ESTIMATOR_READS.items() if section in r] == [section]
  # No algorithm function takes a whole config object.
  for fn in [CREDIT.get(n).fn for n in CREDIT.names()] + [dps_credit, stratified_logprobs, diffu_grpo_loss]:
    assert "cfg" not in inspect.signature(fn).parameters, fn


def test_every_declared_option_is_a_field_of_the_composed_section():
  """An algorithm names its options without importing the composed config (its section lives beside it):
  each option must still be a field of that config, and a section option's class the field's class, or
  the registry entry could not hand it over."""
  from daca_jax.credit import ASSIGNERS
  from daca_jax.likelihood import ESTIMATORS, PER_PASS
  from daca_jax.likelihood.base import EstimatorOptions
  from daca_jax.registry import config_fields
  from daca_jax.rl.methods import METHODS
  from daca_jax.rl.methods.base import LossOptions

  kinds = [(ESTIMATORS + PER_PASS, LikelihoodConfig(), EstimatorOptions),
           (ASSIGNERS, CreditConfig(), None), ([m.loss for m in METHODS], RLConfig(), LossOptions)]
  seen = 0
  for fns, composed, shared in kinds:
    for fn in fns:
      fn = inspect.unwrap(fn)
      defaults = {p.name: p.default for p in inspect.signature(fn).parameters.values()}
      for option in config_fields(fn, shared):
        seen += 1
        assert hasattr(composed, option), (fn.__name__, option)
        if dataclasses.is_dataclass(defaults[option]):
          assert type(getattr(composed, option)) is type(defaults[option]), (fn.__name__, option)
          assert getattr(composed, option) == defaults[option], (fn.__name__, option)  # one default
        else:
          assert getattr(composed, option) == getattr(shared(), option) == defaults[option], (fn.__name__, option)
  assert seen > 40  # the check saw the options


V, MASK, EOS, P, L = 8, 7, 6, 3, 6
PARAMS = jax.tree.map(jnp.asarray, make_params(P + L, V, seed=0))
ROLLOUT = RolloutConfig(gen_length=L, block_length=L, steps=3, temperature=1.0)


def _tokens(b=4, seed=0):
  return jnp.asarray(np.random.default_rng(seed).integers(0, 5, (b, P + L)), jnp.int32)


def _compiled(fn):
  """``fn(PARAMS)`` as a numpy array, computed by ``jax.jit(fn)``: op by op, each new config's first
  call compiles its primitives one at a time, which was slower (most on a loaded machine)."""
  return np.asarray(jax.jit(fn)(PARAMS))


def test_registry_entry_equals_the_direct_call_with_the_methods_fields_only():
  """The entry given a whole section computes what the direct call computes with that method's
  fields, whatever another method's options say."""
  tokens, key = _tokens(), jax.random.key(3)
  sml = StratifiedConfig(num_strata=3, partition="strided")
  cfg = LikelihoodConfig(stratified=sml, p_mask_prompt=0.3, coupled=CoupledConfig(t_min=0.01, t_max=0.02))
  other = dataclasses.replace(cfg, coupled=CoupledConfig(t_min=0.4, t_max=0.6, full_pass=False))
  entry = lambda c: _compiled(lambda prm: LIKELIHOOD.get("stratified")(jax_logits, prm, tokens, P, key, c,
                                                                       mask_id=MASK).logp)
  via_entry, via_other = entry(cfg), entry(other)
  direct = _compiled(lambda prm: stratified_logprobs(jax_logits, prm, tokens, P, key, mask_id=MASK,
                                                     p_mask_prompt=0.3, stratified=sml).logp)
  np.testing.assert_array_equal(via_entry, direct)
  np.testing.assert_array_equal(via_other, direct)
  default = _compiled(lambda prm: stratified_logprobs(jax_logits, prm, tokens, P, key,
                                                      mask_id=MASK).logp)  # LikelihoodConfig()'s
  np.testing.assert_array_equal(default, entry(LikelihoodConfig()))
  assert not np.array_equal(np.asarray(default), np.asarray(direct))
  with pytest.raises(TypeError, match=r"stratified_logprobs takes the options .*not \['coupled'\]"):
    stratified_logprobs(jax_logits, PARAMS, tokens, P, key, mask_id=MASK, coupled=CoupledConfig())


def test_a_per_group_objective_must_declare_group_size():
  from daca_jax.rl.methods.base import objective
  with pytest.raises(TypeError, match="'_bad' is per_group: it must declare the keyword-only group_size"):
    objective("_bad", per_group=True)(lambda logp, batch, *, beta=0.0: (jnp.zeros(()), {}))
  assert "_bad" not in OBJECTIVES


def test_objective_entry_passes_only_its_fields():
  logp = jnp.log(jnp.full((4, 3), 0.5))
  batch = PolicyBatch(logp_old=logp - 0.3, logp_ref=logp + 0.1, advantages=jnp.asarray([1.0, -1.0, 0.5, -0.5]),
                      weights=jnp.ones((4, 3)), mask=jnp.ones((4, 3)))
  cfg = RLConfig(clip_eps=0.1, beta=0.2, rldf=RLDFLossConfig(tau=0.9), group_size=2, learning_rate=3.0)
  loss_entry, _ = OBJECTIVES.get("diffu_grpo")(logp, batch, cfg)
  loss_direct, _ = diffu_grpo_loss(logp, batch, clip_eps=0.1, beta=0.2)
  assert float(loss_entry) == float(loss_direct)
  loss_default, _ = diffu_grpo_loss(logp, batch)  # the defaults are RLConfig's
  assert float(loss_default) == float(OBJECTIVES.get("diffu_grpo")(logp, batch, RLConfig())[0])
  assert float(loss_default) != float(loss_direct)


def test_credit_assign_hands_each_assigner_its_sections_only():
  traj = make_rollout_fn(jax_logits, ROLLOUT, mask_id=MASK, eos_id=EOS, record_step_conf=True)(
      PARAMS, _tokens()[:, :P], jax.random.key(1))
  cfg = CreditConfig(dps=DPSConfig(alpha=1.5), dtca=DTCAConfig(top_frac=0.3), delta=DeltaConfig(gamma=0.3))
  for name, want in [("dtca", {"dtca": cfg.dtca, "dps": cfg.dps}), ("dps", {"dps": cfg.dps}), ("uniform", {})]:
    seen = {}

    def spy(traj, rollout_cfg, inputs, **sections):
      seen.update(sections)
      return traj.completion_mask

    dataclasses.replace(CREDIT.get(name), fn=spy, needs_categories=False, init_state_fn=None).assign(
        traj, cfg, ROLLOUT)
    assert seen == want, name
  np.testing.assert_array_equal(np.asarray(CREDIT.get("dps")(traj, cfg, ROLLOUT)),
                                np.asarray(dps_credit(traj, ROLLOUT, dps=DPSConfig(alpha=1.5))))


def test_direct_calls_validate_their_options_as_the_config_would():
  from daca_jax.errors import ConfigError
  from daca_jax.rl.methods.wd1 import wd1_loss

  logp = jnp.zeros((4, 3))
  batch = PolicyBatch(logp_old=logp, logp_ref=logp, advantages=jnp.zeros(4), weights=jnp.ones((4, 3)),
                      mask=jnp.ones((4, 3)))
  with pytest.raises(ConfigError, match=r"diffu_grpo_loss\.clip_eps=-1\.0 is not allowed: expected a number >= 0"):
    diffu_grpo_loss(logp, batch, clip_eps=-1.0)
  with pytest.raises(ConfigError, match=r"diffu_grpo_loss\.beta=nan"):
    diffu_grpo_loss(logp, batch, beta=float("nan"))
  with pytest.raises(TypeError, match=r"diffu_grpo_loss takes the options \['clip_eps', 'beta'\], not \['rldf'\]"):
    diffu_grpo_loss(logp, batch, rldf=RLDFLossConfig(tau=0.5))  # an RLConfig field diffu-GRPO does not read
  with pytest.raises(ConfigError, match=r"wd1_loss\.group_size=1 is not allowed: expected >= 2"):
    wd1_loss(logp, batch, group_size=1)
  loss, _ = jax.jit(lambda b: diffu_grpo_loss(logp, batch, beta=b))(jnp.float32(0.1))  # a traced option
  assert np.isfinite(float(loss))
  with pytest.raises(ConfigError, match=r"diffu_grpo_loss\.clip_eps=-1\.0"):  # the concrete ones are still checked
    jax.jit(lambda b: diffu_grpo_loss(logp, batch, beta=b, clip_eps=-1.0))(jnp.float32(0.1))
  tokens, key = _tokens(), jax.random.key(0)
  with pytest.raises(ConfigError, match=r"stratified_logprobs\.stratified\.num_strata=0"):
    stratified_logprobs(jax_logits, PARAMS, tokens, P, key, mask_id=MASK, stratified=StratifiedConfig(num_strata=0))
  with pytest.raises(ConfigError, match=r"stratified_logprobs\.stratified=\{'num_strata': 2\} is not allowed: "
                                        r"expected a StratifiedConfig section"):
    stratified_logprobs(jax_logits, PARAMS, tokens, P, key, mask_id=MASK, stratified={"num_strata": 2})
  with pytest.raises(ConfigError, match=r"stratified_logprobs\.p_mask_prompt=1\.5"):
    stratified_logprobs(jax_logits, PARAMS, tokens, P, key, mask_id=MASK, p_mask_prompt=1.5)
  traj = make_rollout_fn(jax_logits, ROLLOUT, mask_id=MASK, eos_id=EOS, record_step_conf=True)(
      PARAMS, tokens[:, :P], jax.random.key(1))
  with pytest.raises(ConfigError, match=r"dps_credit\.dps\.w_min"):
    dps_credit(traj, ROLLOUT, dps=DPSConfig(w_min=3.0, w_max=2.0))
  with pytest.raises(TypeError, match=r"dps_credit takes the options \['dps'\], not \['dtca'\]"):
    dps_credit(traj, ROLLOUT, dtca=DTCAConfig())
  # A concrete one-element array is checked as its number (np.float64(-1) passed unchecked before).
  for bad in (np.float64(-1.0), jnp.float32(-1.0)):
    with pytest.raises(ConfigError, match=r"diffu_grpo_loss\.beta=-1\.0 is not allowed"):
      diffu_grpo_loss(logp, batch, beta=bad)
  # A section of another method's class, even one of the same name, is refused (rldf_loss took the
  # likelihood's RLDFConfig without a word, and spg_loss crashed on a dict).
  from daca_jax.likelihood.rldf import RLDFConfig
  from daca_jax.rl.methods.rldf import rldf_loss
  with pytest.raises(ConfigError, match=r"rldf_loss\.rldf=RLDFConfig\(.*\) is not allowed: expected a RLDFLossConfig section"):
    rldf_loss(logp, batch, rldf=RLDFConfig())


def test_an_algorithm_parameter_the_registry_cannot_set_is_refused_when_it_is_declared():
  """An option is a shared field or the algorithm's own section; any other keyword-only parameter (here
  ``rl.num_iterations``, ``likelihood.elbo_terms``, ``credit.drop_agreed``) would never be set from the
  config, so its config value would be ignored without a word."""
  from daca_jax.credit.base import credit_assigner
  from daca_jax.likelihood.base import estimator
  from daca_jax.rl.methods.base import objective

  with pytest.raises(TypeError, match=r"keyword-only parameters \['num_iterations'\] are not options"):
    objective("_probe")(lambda logp, batch, *, beta=0.04, num_iterations=1: (logp, {}))
  with pytest.raises(TypeError, match=r"\['elbo_terms'\] are not options"):
    estimator("_probe")(lambda fns, params, tokens, prompt_len, key, *, mask_id, elbo_terms="summed": tokens)
  with pytest.raises(TypeError, match=r"\['drop_agreed'\] are not options"):
    credit_assigner("_probe")(lambda traj, rollout_cfg, inputs=None, *, drop_agreed=False: None)
  # what the registries hold passes: a section as the default, the shared fields, the estimators' inputs
  assert objective("_probe")(lambda logp, batch, *, beta=0.04, rldf=RLDFLossConfig(): (logp, {})).reads == ("beta", "rldf")
  assert estimator("_probe")(lambda fns, params, tokens, prompt_len, key, *, mask_id, commit_step=None,
                             p_mask_prompt=0.0: tokens).entry.reads == ("p_mask_prompt",)


def test_a_config_section_of_the_wrong_type_is_a_config_error():
  from daca_jax.errors import ConfigError

  with pytest.raises(ConfigError, match=r"^rl\.spg=3 is not allowed: expected a SPGConfig section"):
    RLConfig(spg=3).validate()
