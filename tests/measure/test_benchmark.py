"""Benchmark helpers: FLOP counts against the parameter tree, the PyTorch-eager port against the JAX
model, and the LLaDA-8B benchmark code path (experiments/scripts/gpu_check.sh) at CPU size."""
import json
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from daca_jax.measure import benchmarking as bm
from daca_jax.diffusion import rollout
from daca_jax.models import count_params, init_model, make_logits_fn, tiny_config
from daca_jax.config.rollout import RolloutConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
CFG = tiny_config(d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, mlp_dim=48)


def test_matmul_params_are_all_but_the_embedding_table():
  _, params = init_model(CFG, 0)
  norms = 2 * CFG.n_layers * CFG.d_model + CFG.d_model  # RMSNorm scales are not matmul weights
  assert bm.matmul_params(CFG) == count_params(params) - CFG.vocab_size * CFG.d_model - norms


def test_forward_and_cached_rollout_flops():
  b, t = 3, 10
  attn = 4 * CFG.n_layers * t * t * CFG.d_model
  assert bm.forward_flops(CFG, b, t) == b * (2 * bm.matmul_params(CFG) * t + attn)
  # prefix cache, 2 blocks of 4 after an 8-token prompt, 2 steps per block: per block one full pass
  # (its head projects the 8 completion positions only) and one pass over the block and what follows
  # it (8, then 4 queries) against all 16 keys.
  # With step records the head projects every completion position (the query window when cached);
  # without, only the block's 4.
  rc = RolloutConfig(gen_length=8, block_length=4, steps=4, kv_cache="prefix")
  head = b * 2 * CFG.d_model * CFG.vocab_size
  full = bm.forward_flops(CFG, b, 16) - 8 * head
  cached = bm.forward_flops(CFG, b, 8, 16) + bm.forward_flops(CFG, b, 4, 16)
  assert bm.rollout_flops(CFG, rc, b, 8, 4, records=True) == pytest.approx(2 * full + cached)
  assert bm.rollout_flops(CFG, rc, b, 8, 4) == pytest.approx(2 * (full - 4 * head) + cached - 4 * head)
  plain = RolloutConfig(gen_length=8, block_length=4, steps=4)
  assert bm.rollout_flops(CFG, plain, b, 8, 4, records=True) == 4 * full
  assert bm.rollout_flops(CFG, plain, b, 8, 4) == pytest.approx(4 * (full - 4 * head))


def test_peak_flops_table_and_override():
  assert bm.peak_flops(123.0) == 123e12
  cpu = jax.devices("cpu")[0]
  assert bm.peak_flops(0.0, cpu) is None  # MFU is 'n/a' on CPU unless a peak is given


@pytest.mark.parametrize("kind,peak", [("TPU v5", 459e12), ("TPU v5 lite", 197e12), ("TPU v6 lite", 918e12),
                                       ("NVIDIA H100 80GB HBM3", 989e12), ("NVIDIA A100-SXM4-40GB", 312e12),
                                       ("NVIDIA H100 PCIe", None), ("TPU v4 lite", None)])
def test_peak_flops_reads_the_plan_device_table_by_exact_device_kind(kind, peak):
  """JAX names a v5p "TPU v5" and a v5e "TPU v5 lite": a substring table gave the v5p the v5e's peak.
  A kind without an entry (an H100 PCIe's peak is lower than the SXM's) has no MFU, not a wrong one."""
  from daca_jax.hardware import device_for_kind

  class FakeDevice:
    device_kind = kind

  assert bm.peak_flops(0.0, FakeDevice()) == peak
  assert (device_for_kind(kind) is None) == (peak is None)


@pytest.mark.slow  # the torch port is the benchmark's baseline, not the library
def test_torch_eager_port_matches_jax():
  torch = pytest.importorskip("torch")
  pytest.importorskip("transformers")
  gd, params = init_model(CFG, 1)
  logits_fn = make_logits_fn(gd)
  model = bm.torch_llama_from_params(params, CFG)
  x = np.random.default_rng(0).integers(0, 256, (2, 12))
  with torch.no_grad():
    ref = model(input_ids=torch.from_numpy(x), attention_mask=torch.zeros((2, 1, 12, 12))).logits.numpy()
  np.testing.assert_allclose(np.asarray(logits_fn(params, jnp.asarray(x))), ref, rtol=1e-4, atol=1e-5)
  rc = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=0.0)
  prompts = np.random.default_rng(1).integers(0, 256, (3, 5))
  jax_tokens = rollout(logits_fn, params, jnp.asarray(prompts), jax.random.PRNGKey(0), rc,
                       mask_id=CFG.mask_token_id, eos_id=258).tokens
  torch_tokens = bm.torch_llada_generate(model, prompts, rc, mask_id=CFG.mask_token_id)
  np.testing.assert_array_equal(np.asarray(jax_tokens), torch_tokens)


@pytest.mark.slow
def test_llada_8b_code_path_at_cpu_size(tmp_path):
  """gpu_check.sh's command with --shrink: the same model config path, vocabulary and sections."""
  out = tmp_path / "bench.json"
  cmd = [sys.executable, "experiments/benchmark.py", "--model=llada_8b", "--shrink", "--sections=rollout,fast",
         "--batch=2", "--prompt_len=4", "--gen_length=8", "--block_length=4", "--steps=4", "--repeats=1",
         "--fast_variants=plain,dual", "--peak_tflops=1", f"--json={out}"]
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  res = json.loads(out.read_text())
  assert res["model"] == "llada_8b" and res["gen_length"] == 8
  assert 0 < res["rollout_mfu"] < 1 and res["rollout_tokens_per_s"] > 0
  assert res["fast_dual_model_calls"] == 4 and "fast_prefix_model_calls" not in res
  assert res["fast_dual_reference"] == "plain" and 0 <= res["fast_dual_token_agreement_vs_reference"] <= 1
  assert "rollout MFU:" in proc.stdout


def test_ratio_stats_are_per_round_median_and_range():
  # Per-round ratios 2, 4, 1 (rounds pair up: num[i] / den[i]), not best / best (1 / 1 = 1).
  stats = bm.ratio_stats([2.0, 4.0, 1.0], [1.0, 1.0, 1.0])
  assert stats == {"median": 2.0, "min": 1.0, "max": 4.0, "rounds": 3}
  calls = []
  runs = bm.interleaved_runs({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3)
  assert calls == ["a", "b"] + ["a", "b"] * 3  # warm-up, then alternating rounds
  assert [len(v) for v in runs.values()] == [3, 3]


def test_rollout_modes_of_the_rl_iteration_benchmark():
  from daca_jax.errors import ConfigError

  rc = RolloutConfig(gen_length=8, block_length=4, steps=4, temperature=1.0)
  plain = bm.rollout_mode_config(rc, "plain", 0.9)
  assert (plain.kv_cache, plain.threshold) == ("none", 0.0) and plain.temperature == 1.0
  both = bm.rollout_mode_config(rc, "prefix+threshold", 0.9)
  assert (both.kv_cache, both.threshold, both.steps) == ("prefix", 0.9, 4)
  assert bm.rollout_mode_config(rc, "dual", 0.9).kv_cache == "dual"
  for bad in ("", "prefix+dual", "fast", "threshold+"):
    with pytest.raises(ConfigError, match=r"rl_modes=.* is not allowed: expected 'plain' or"):
      bm.rollout_mode_config(rc, bad, 0.9)
