"""daca_jax.planning.preset_check: the random LLaDA folder gpu_check.sh trains a paper preset from, and the
measured iteration next to the plan."""
import jinja2
import ml_dtypes
import numpy as np
import pytest

from daca_jax.models import checkpoint_loader
from daca_jax.models.hf_import import checkpoint_config
from daca_jax.models.random_checkpoint import _fast_bf16
from daca_jax.planning.devices import device_spec
from daca_jax.planning import preset_check
from daca_jax.tasks.chat import ChatTemplate
from daca_jax.tasks.hf_tokenizer import HFTokenizer


def test_random_llada_folder_has_the_released_special_ids_and_template(tmp_path):
  folder = preset_check.write_random_llada(tmp_path / "ckpt", "tiny")
  files = checkpoint_loader.open_checkpoint(folder)
  cfg, family, _ = checkpoint_config(files)
  assert family == "llada" and (cfg.d_model, cfg.n_layers, cfg.vocab_size, cfg.mask_token_id) == (32, 1, 126464, 126336)
  assert cfg.vocab_limit == 126349  # the tokenizer's ids end at the last added token, as the release's
  assert {e.dtype for e in files.tensors.values()} == {"BF16"}
  tok = HFTokenizer.for_llada(folder)
  assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.mask_id) == (126080, 126081, 126081, 126336)
  assert tok.tok.token_to_id("<|start_header_id|>") == 126346 and tok.tok.token_to_id("<|eot_id|>") == 126348
  prompt = "Numbers: [12, 34, 56]\nTarget: 78"
  assert tok.decode(tok.encode(prompt)) == prompt
  assert len(tok.encode(prompt)) < len(prompt) / 1.5  # the stand-in BPE merges the tasks' words
  # the template, rendered as Jinja renders it, is the chat prompt the library renders from the folder
  config = __import__("json").loads((folder / "tokenizer_config.json").read_text())
  rendered = jinja2.Environment().from_string(config["chat_template"]).render(
      messages=[{"role": "user", "content": " 2 + 2? "}], bos_token=config["bos_token"])
  assert rendered == ("<|startoftext|><|start_header_id|>user<|end_header_id|>\n\n2 + 2?<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")
  assert HFTokenizer.from_checkpoint(folder).chat_template.user_turn(" 2 + 2? ") == rendered
  assert config["added_tokens_decoder"]["126336"]["content"] == "<|mdm_mask|>"


def test_fast_fill_is_random_bf16_of_weight_scale():
  x = _fast_bf16(np.random.default_rng(0), (256, 512))
  assert x.dtype == ml_dtypes.bfloat16
  f = np.abs(x.astype(np.float32))
  assert f.min() >= 2.0 ** -7 and f.max() < 2.0 ** -5
  assert 0.4 < np.mean(x.astype(np.float32) > 0) < 0.6 and len(np.unique(f)) == 256  # signs, all mantissas


def _plan(rollout_flops, update_flops):
  cost = lambda f: {"flops": f, "bytes_accessed": 0.0, "link_bytes": 0.0}
  return {"iteration_peak_bytes": 50e9, "cost_per_device": {"rollout": cost(rollout_flops), "update": cost(update_flops)},
          "flops_per_device": {"rollout": rollout_flops, "update": update_flops}, "setting": {"rl_steps": 2}}


def test_compare_reads_the_last_iteration_that_compiled_nothing():
  h200 = device_spec("h200")
  plan = _plan(2 * h200.peak_bf16_flops, h200.peak_bf16_flops)  # 2 s and 1 s at MFU 1
  metrics = [{"step": 1, "rollout_s": 60.0, "update_s": 30.0, "includes_compile": 1.0},
             {"step": 2, "rollout_s": 4.0, "update_s": 2.0, "includes_compile": 0.0, "device_peak_bytes": 40e9}]
  out = preset_check.compare(plan, metrics, h200, mfu=0.5, usable=0.9)
  assert out["predicted"]["rollout_s"] == pytest.approx(4.0) and out["predicted"]["iteration_s"] == pytest.approx(6.0)
  assert out["measured"]["iteration_s"] == 6.0 and out["measured"]["mfu"] == pytest.approx(0.5)
  assert out["measured"]["device_peak_gb"] == pytest.approx(40.0)
  assert ["peak GB per device", 50.0, 40.0] in out["rows"]
  with pytest.raises(ValueError, match="without compilation"):
    preset_check.compare(plan, metrics[:1], h200, mfu=0.5, usable=0.9)
