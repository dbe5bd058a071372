"""Paper presets: each base method's released recipe on LLaDA-8B-Instruct, with DACA's arms on top.

Launch (from the repository root; the checkpoint folder is yours, downloaded beforehand):

  python experiments/train.py --config=configs/paper.py:d1_gsm8k_daca --workdir=runs/d1_gsm8k_daca \
      --config.model.init_checkpoint=/ckpt/LLaDA-8B-Instruct
  # the same recipe shrunk to CPU size, a plumbing check on a tiny checkpoint passed the same way:
  python experiments/train.py --config=configs/paper.py:d1_gsm8k_daca,smoke --workdir=/tmp/smoke \
      --config.model.init_checkpoint=/tmp/tiny-llada

Names (the text after ':'): ``<base>_<task>[_<arm>][,smoke]`` with base in :data:`BASES` (d1 =
diffu-GRPO, wd1, gdpo, spg, espo, bgpo, map; :data:`NO_ARMS` lists the arms a base cannot take), task in :data:`TASKS` and arm in :data:`ARMS`: none = the base method, ``dps``
= ``rl.credit=dps``, ``sml`` = ``rl.likelihood=stratified``, ``daca`` = both. :func:`preset_names`
lists them all (and their ``,smoke`` forms).

Every value below names its source on its line: a repository, file and commit (short hashes; the
full ones are in :data:`SOURCES`), or says that it is this library's choice where no source gives one.
The recipe table with the values this module cannot express (d1's 4-bit base model, its warmup
ratio, DeepSpeed) is ``docs/paper_recipes.md``. The DACA paper's own hyper-parameters (DPS alpha and
clip, SML's K) are not available offline (only its abstract is): the arms use this library's defaults
(``credit.dps.*`` and ``likelihood.stratified.*`` in ``configs/base.py``) and say so.

The presets set the run's choices only (dtypes, remat, LoRA, lengths, the RL recipe, data, evaluation),
never the model's architecture: that comes from the checkpoint's ``config.json``
(:mod:`daca_jax.run.from_checkpoint`), so one preset serves LLaDA-8B-Instruct, Dream-7B or a tiny test
checkpoint. They set ``model.require_checkpoint``: a run without ``--config.model.init_checkpoint`` is
refused before any work (the ``,smoke`` form too: it needs a tiny checkpoint, e.g.
``tests/hf_fixtures.py``'s). LLaDA-8B-Instruct's shape, for plans without a checkpoint, is
:func:`daca_jax.config.model.llada_8b_config`.

Prompts: d1, wd1 and GDPO train on d1's training prompts (``task.train_prompt_style="d1_train"``,
:mod:`daca_jax.tasks.d1_train_prompts`) with d1's training rewards (``task.reward="d1"``) on the four
tasks d1 trains (GSM8K, MATH, Countdown, Sudoku), and evaluate on d1's evaluation prompts
(``task.options.prompt_style="chat"``) with the library's graders. Code and JSON have no d1 training
prompt or reward: they train and evaluate on the chat prompts and the task's graded reward.

Evaluation follows d1's protocol (``eval.protocol="d1"``, :data:`D1_EVAL`: greedy, lengths
128/256/512, blocks of 32, length / 2 steps) on the test set before and after RL, and on a validation
split every ``rl.eval_every`` iterations (wd1's cadence); ``results.json`` reports every length
(``L<length>/<metric>``). Launch on several devices with ``--config.parallel.strategy=fsdp`` (and
``parallel.fsdp``) as ``experiments/plan.py`` advises; the presets do not fix a device count.
"""
from __future__ import annotations

import math

import ml_collections

from configs import base
from daca_jax.errors import ConfigError

BASES = ("d1", "wd1", "gdpo", "spg", "espo", "bgpo", "map")
TASKS = ("gsm8k", "math500", "countdown", "sudoku", "humaneval", "mbpp", "json")
ARMS = ("", "dps", "sml", "daca")
# Arms a base cannot take, with the reason (their names are not presets; parse_name says why).
NO_ARMS = {"map": (("sml", "daca"), "MAP's position term is scored in StepMerge's segment passes, which SML's "
                                    "likelihood would replace")}

# Full commit hashes of the sources cited by short hash on the lines below.
SOURCES = {
    "d1": "dllm-reasoning/d1 @ 837888f22c21a5da91a0af2b0d7b19e81d9b47ec",
    "d1-later": "dllm-reasoning/d1 @ 4bab4b9ac07ee83956308e977dbc1d58a11d8ab7 (diffu-grpo/reward_func.py)",
    "trl": "huggingface/trl @ 0f88c179e30b3439467942a08c3190f624d5c423 (d1's env.yml pin)",
    "wd1": "xiaohangt/wd1 @ 08989851e5dd84ac31af04d28f20a93488d66ffb",
    "gdpo-nemo": "NVIDIA-NeMo/RL @ 7a4616dd48a795f07e4a3ea5f0e7847d4d30e23b "
                 "(research/gdpo/configs/gdpo_llada_8b.yaml, README.md: a port of GDPO's published recipe; "
                 "the authors' kevinrojas1499/GDPO is not in the offline store)",
    "llada": "ML-GSAI/LLaDA @ b7e6c3565f194352da44b38dd12b6970597309f3 (generate.py)",
    "spg": "facebookresearch/SPG @ a1c712091aee3fde759bbf73b7850546265cd52d",
    "espo": "ML-GSAI/ESPO @ b5f2dac4c54073a2f36c00bb28bc754a99730159",
    "bgpo": "Lin et al. 2025, arXiv 2510.11683 (abstract; THU-KEG/BGPO README as mirrored at stig.sh): "
            "the repository itself is not in the offline store, so its config files could not be read",
    "bgpo-code": "THU-KEG/LLaDA-8B-BGPO-code model card (README.md @ ee75175, as mirrored at fast.hugflare.com): "
                 "response length 512, 512 diffusion steps, block size 32, n_t 16, learning rate 5e-7, batch size 16",
    "map": "Haran71/mask-aware-policy-gradients @ a7ff19d6cf561860eb58020d27840ff06659f4b6 "
           "(map/configs/gsm8k.yaml, map/configs/math.yaml, scripts/train_gsm8k.sh; the yaml files call "
           "themselves a 'draft release recipe' whose paper reproduction is not verified)",
}

# The library's task names; the names of a preset are the short forms.
_TASK_NAMES = {"sudoku": "sudoku4x4", "json": "json_schema"}

# d1's evaluation protocol (dllm-reasoning/d1 @ 837888f eval/eval.py, eval/generate.py, eval/run_eval.sh):
# greedy low-confidence decoding of each length, blocks of 32, length/2 steps, the "<reasoning>" prefill,
# its system prompts (the library's "chat" prompt style). The presets' eval.* fields are these values.
D1_EVAL = dict(
    gen_lengths=(128, 256, 512),  # the d1 paper's tables; run_eval.sh's loop lists 128 and 256 (512 only in its batch-size branch)
    block_length=32,  # eval.py --block_length default
    steps_per_token=0.5,  # eval.py: diffusion_steps = gen_length // 2
    temperature=0.0,  # eval.py evaluate(temperature=0.0): greedy
    remasking="low_confidence",  # generate.py default
    add_reasoning=True,  # eval.py: "<reasoning>" prefilled for all models
    batch_size_per_device={128: 8, 256: 8, 512: 4},  # run_eval.sh
    checkpoint_every_updates=100,  # d1 evaluates saved checkpoints offline: train.yaml save_steps 100
)
# wd1's evaluation during training (xiaohangt/wd1 @ 0898985 wd1/train.yaml, wd1/run_train.py).
WD1_EVAL = dict(
    every_updates=1000,  # train.yaml eval_steps (optimizer updates)
    gen_length=256, steps=128, block_length=32, temperature=0.0,  # AccuracyEvalCallback arguments
    test_subsample={"gsm8k": 250, "math500": 250, "countdown": None, "sudoku": None},  # SUB_SAMPLE_MAP (None: all)
)

# Per task: the library's training pool (sft.num_train_examples) and validation split. GSM8K's and
# MATH's pools are their train files less the validation split (7473 and 8521 usable records in
# ../shared/data); the generated tasks use the library's default pool; MBPP train has 471 records.
_POOL = {"gsm8k": (7223, 250), "math500": (8271, 250), "countdown": (20000, 250), "sudoku": (20000, 250),
         "humaneval": (421, 50), "mbpp": (421, 50), "json": (20000, 100)}
# d1's μ (NUM_ITER in diffu-grpo/slurm_scripts/<task>_base.sbatch @ 837888f); code and JSON have no d1
# script, so they keep train.yaml's num_iterations 12.
_D1_MU = {"gsm8k": 12, "math500": 12, "countdown": 8, "sudoku": 8, "humaneval": 12, "mbpp": 12, "json": 12}
# wd1's μ (NUM_ITER in run/wll_NP_<task>.sh @ 0898985; code and JSON: its train.yaml's 12).
_WD1_MU = {"gsm8k": 12, "math500": 12, "countdown": 12, "sudoku": 8, "humaneval": 12, "mbpp": 12, "json": 12}
# Tasks d1 trains on, with a training reward (diffu-grpo/diffu_grpo_train.py @ 837888f) and training
# prompts (diffu-grpo/data_utils.py @ 837888f).
_D1_TASKS = ("gsm8k", "math500", "countdown", "sudoku")

# How `experiments/train.py --help` shows the presets (daca_jax.run.presets), and the error of a bad name.
PRESET_PATTERN = (f"<base>_<task>[_<arm>][,smoke] with base in {list(BASES)}, task in {list(TASKS)}, "
                  f"arm in {[a for a in ARMS if a]} or none (e.g. d1_gsm8k_daca or wd1_sudoku,smoke)")


def preset_names(smoke: bool = False) -> list[str]:
  """Every preset name (with ``,smoke`` appended when ``smoke``): the cross product of the parts."""
  names = [f"{b}_{t}" + (f"_{a}" if a else "") for b in BASES for t in TASKS for a in ARMS
           if a not in NO_ARMS.get(b, ((), ""))[0]]
  return [n + ",smoke" for n in names] if smoke else names


# Every name, the default (d1 on GSM8K) first: the cross product of the parts, then their smoke forms.
PRESETS = tuple(preset_names() + preset_names(smoke=True))


def parse_name(preset: str) -> tuple[str, str, str, bool]:
  """``(base, task, arm, smoke)`` of a preset name.

  Raises:
    ConfigError: a name that is not of :data:`PRESET_PATTERN` (the message gives the pattern).
  """
  name, *flags = preset.split(",")
  parts = name.split("_")
  if (flags not in ([], ["smoke"]) or len(parts) not in (2, 3) or parts[0] not in BASES
      or parts[1] not in TASKS or (len(parts) == 3 and parts[2] not in ARMS[1:])):
    raise ConfigError("configs/paper.py preset", preset, PRESET_PATTERN)
  arm = parts[2] if len(parts) == 3 else ""
  if arm in NO_ARMS.get(parts[0], ((), ""))[0]:
    raise ConfigError("configs/paper.py preset", preset, f"another arm for base {parts[0]!r}: "
                      f"{NO_ARMS[parts[0]][1]}")
  return parts[0], parts[1], arm, flags == ["smoke"]


def _d1(c: ml_collections.ConfigDict, task: str) -> None:
  """d1's diffu-GRPO from LLaDA-8B-Instruct (the ``<task>_base.sbatch`` runs, no s1K SFT)."""
  # No architecture field: the checkpoint's config.json sets it (LLaDA-8B-Instruct: sbatch MODEL_PATH).
  c.model.init_checkpoint = ""  # yours: --config.model.init_checkpoint=/ckpt/LLaDA-8B-Instruct
  c.model.require_checkpoint = True  # a recipe for a pretrained checkpoint: refused without one
  c.model.dtype = "bfloat16"  # train.yaml bf16: true (mixed-precision compute)
  c.model.param_dtype = "bfloat16"  # train.yaml torch_dtype bfloat16; d1 also loads the base in 4-bit NF4 (diffu_grpo_train.py BitsAndBytesConfig), not expressible here
  c.model.lora_rank = 128  # train.yaml lora_r
  c.model.lora_alpha = 64.0  # train.yaml lora_alpha
  c.model.lora_dropout = 0.05  # train.yaml lora_dropout
  c.model.lora_targets = "q,k,v,o,gate,up,down"  # diffu_grpo_train.py LoraConfig target_modules (all seven)
  c.model.remat = "full"  # library choice (memory); d1: gradient_checkpointing false with a 4-bit base
  c.rollout.gen_length = 256  # train.yaml max_completion_length
  c.rollout.block_length = 32  # train.yaml block_length
  c.rollout.steps = 128  # train.yaml diffusion_steps
  # diffu_grpo_config.py default 0.9 (train.yaml sets none); sudoku_base.sbatch's "--temperature 0.3"
  # follows a line without a trailing backslash, so the shell never passes it to the trainer.
  c.rollout.temperature = 0.9
  c.rollout.remasking = "low_confidence"  # train.yaml remasking
  c.likelihood.p_mask_prompt = 0.15  # train.yaml p_mask_prompt (diffu_grpo_trainer.py forward_process)
  c.rl.objective = "diffu_grpo"  # diffu_grpo_trainer.py compute_loss: token ratio, clip, k3 KL
  c.rl.credit = "uniform"  # d1 weights every token alike
  c.rl.likelihood = "mean_field"  # diffu_grpo_trainer.py: whole completion masked, one pass
  c.rl.advantage = "group_mean"  # diffu_grpo_trainer.py: advantages = rewards - group mean (no std)
  c.rl.group_size = 6  # train.yaml num_generations
  # trl grpo_trainer.py _get_train_sampler: per_device_train_batch_size 6 x 8 GPUs (accelerate_a100.yaml
  # num_processes) x gradient_accumulation_steps 2 = 96 completions = 16 prompts per rollout batch.
  c.rl.prompts_per_step = 16
  c.rl.num_iterations = _D1_MU[task]  # <task>_base.sbatch NUM_ITER (μ: updates per rollout batch)
  c.rl.clip_eps = 0.5  # train.yaml epsilon
  c.rl.beta = 0.04  # train.yaml beta (reference = the base with adapters off; sync_ref_model has no reference model to sync under LoRA)
  c.rl.learning_rate = 3e-6  # train.yaml learning_rate
  c.rl.lr_schedule = "constant"  # train.yaml lr_scheduler_type constant_with_warmup
  c.rl.weight_decay = 0.1  # train.yaml weight_decay
  c.rl.max_grad_norm = 0.2  # train.yaml max_grad_norm
  c.rl.adam_b1 = 0.9  # train.yaml adam_beta1
  c.rl.adam_b2 = 0.99  # train.yaml adam_beta2
  c.rl.adam_eps = 1e-8  # transformers TrainingArguments default adam_epsilon (train.yaml sets none)
  c.rl.grad_accum = 2  # train.yaml gradient_accumulation_steps
  # diffu_grpo_trainer.py compute_loss: mask seed `self._step % num_iterations`, _step counting accumulation
  # micro-steps (a micro-batch sees 6 of the 12 seeds); the presets built on this one reset it unless their
  # trainer was read to index the same way
  c.rl.mask_seed_reuse = True
  c.rl.rollout_batch = 48  # train.yaml generation_batch_size 6 rows per GPU x 8 GPUs
  c.sft.steps = 0  # the *_base.sbatch runs start RL from LLaDA-8B-Instruct (no s1K SFT)
  pool, val = _POOL[task]
  c.sft.num_train_examples = pool  # training pool (see _POOL); d1's data: docs/paper_recipes.md
  c.task.num_val_examples = val  # validation split for rl.eval_every (wd1 evaluates 250 GSM8K/MATH items)
  # train.yaml num_train_epochs 10 over the pool, as rollout iterations: an upper bound. d1 stops at the
  # SLURM limit (#SBATCH --time=72:00:00) and reports chosen checkpoints; the steps run are not published.
  c.rl.steps = math.ceil(10 * pool / c.rl.prompts_per_step)
  # train.yaml warmup_ratio 1e-4 of all optimizer updates (transformers rounds up).
  c.rl.warmup_steps = math.ceil(1e-4 * c.rl.steps * c.rl.num_iterations)
  c.checkpoint.every = math.ceil(100 / c.rl.num_iterations)  # train.yaml save_steps 100 (optimizer updates)
  c.rl.eval_every = math.ceil(WD1_EVAL["every_updates"] / c.rl.num_iterations)  # d1 has none in training: wd1's cadence
  c.eval.protocol = "d1"  # D1_EVAL: eval.py / generate.py decoding at each length
  c.eval.gen_lengths = ",".join(map(str, D1_EVAL["gen_lengths"]))  # the d1 paper's tables: 128, 256, 512
  c.eval.block_length = D1_EVAL["block_length"]  # eval.py --block_length 32
  c.eval.steps = 0  # eval.py: diffusion_steps = gen_length // 2 (0: length / 2)
  c.eval.batch_size = 32  # run_eval.sh batch_size 8 per GPU x 8 GPUs is 64; 32 = 4 per GPU, its size at length 512, fits every length
  c.eval.temperature = 0.0  # eval.py: greedy
  c.task.name = _TASK_NAMES.get(task, task)  # the library's name of the task
  c.task.options.prompt_style = "chat"  # d1's evaluation prompts in the checkpoint's chat template (eval/*.py)
  # d1's training prompts (data_utils.py: another system prompt, no <reasoning> prefill) where d1 trains
  # the task; code and JSON train on the evaluation prompts ("").
  c.task.train_prompt_style = "d1_train" if task in _D1_TASKS else ""
  if task == "json":
    c.task.options.source = "jsonschemabench"  # real schemas; train/test split by a stable hash (disjoint)
  # d1's training rewards (reward_func.py) where d1 has one; code and JSON: the task's graded reward.
  c.task.reward = "d1" if task in _D1_TASKS else ""
  c.seed = 42  # train.yaml seed


def _wd1(c: ml_collections.ConfigDict, task: str) -> None:
  """wd1 (``run/wll_NP_<task>.sh``: RL from LLaDA-8B-Instruct without SFT), on d1's train.yaml."""
  _d1(c, task)
  c.rl.mask_seed_reuse = False  # wd1's trainer not read for its mask-seed indexing: a new draw per update
  c.rl.objective = "wd1"  # run_train.py trainer_type wll_d1_neg: RevDiffuGRPOTrainer (softmax(±A)-weighted log-likelihood)
  c.rl.beta = 0.0  # trainers/rev_grpo_trainer.py compute_loss has no KL term (train.yaml's beta 0.04 is unused)
  # wll_NP_*.sh --num_processes 4: 6 per GPU x 4 GPUs x gradient_accumulation_steps 2 = 48 = 8 prompts.
  c.rl.prompts_per_step = 8
  c.rl.num_iterations = _WD1_MU[task]  # wll_NP_<task>.sh NUM_ITER
  c.rl.rollout_batch = 24  # train.yaml generation_batch_size 6 per GPU x 4 GPUs
  c.rl.steps = math.ceil(10 * c.sft.num_train_examples / c.rl.prompts_per_step)  # train.yaml num_train_epochs 10 (upper bound)
  c.rl.warmup_steps = math.ceil(1e-4 * c.rl.steps * c.rl.num_iterations)  # train.yaml warmup_ratio 1e-4
  c.checkpoint.every = math.ceil(500 / c.rl.num_iterations)  # wd1 train.yaml save_steps 500
  c.rl.eval_every = math.ceil(WD1_EVAL["every_updates"] / c.rl.num_iterations)  # wd1 train.yaml eval_steps 1000
  c.eval.batch_size = 24  # wd1 train.yaml per_device_eval_batch_size 6 x 4 GPUs
  # Prompts, rewards and data: d1's (wd1/data_utils.py and wd1/reward_func.py are d1's files), as _d1 sets.


def _gdpo(c: ml_collections.ConfigDict, task: str) -> None:
  """GDPO (Rojas et al. 2025), as NVIDIA-NeMo/RL's port states its published recipe; the rest d1's
  (GDPO's README: "built on top of the D1 repository")."""
  _d1(c, task)
  c.rl.mask_seed_reuse = False  # NeMo's GDPO trainer was not read for its mask-seed indexing: a new draw per update
  c.rl.objective = "gdpo"  # gdpo_llada_8b.yaml loss_fn: one length-normalised sequence ratio, clipped
  c.rl.likelihood = "elbo"  # gdpo_llada_8b.yaml likelihood type sdmc (semi-deterministic Monte Carlo ELBO)
  c.likelihood.elbo.nodes = 3  # gdpo_llada_8b.yaml quadrature gauss-3, mc_samples 1 ("the published recipe uses three", README)
  c.likelihood.p_mask_prompt = 0.0  # gdpo_llada_8b.yaml p_mask_prompt 0.0 ("leave it at 0.0 to reproduce GDPO", README)
  c.rl.advantage = "group_mean"  # gdpo_llada_8b.yaml normalize_rewards false: A = R - mean (also gdpo.github.io)
  c.rl.beta = 0.0  # gdpo_llada_8b.yaml reference_policy_kl_penalty 0.0
  c.rl.clip_eps = 0.5  # gdpo_llada_8b.yaml ratio_clip_min/max 0.5
  c.rl.prompts_per_step = 32  # gdpo_llada_8b.yaml num_prompts_per_step
  c.rl.group_size = 6  # gdpo_llada_8b.yaml num_generations_per_prompt
  c.rl.num_iterations = 12  # gdpo_llada_8b.yaml num_iterations ("the 12 policy updates used by official GDPO")
  c.rl.learning_rate = 3e-7  # gdpo_llada_8b.yaml optimizer lr (betas 0.9/0.99, weight decay 0.1, eps 1e-8 as d1)
  c.rollout.temperature = 1.0  # gdpo_llada_8b.yaml generation temperature
  c.rl.grad_accum = 4  # library choice (memory): NeMo trains the 192-row batch in micro-batches of 1
  c.rl.rollout_batch = 48  # library choice (memory), as d1's
  # GDPO's schedule and run length are not available offline: d1's (constant with warmup, 10 epochs).
  c.rl.steps = math.ceil(10 * c.sft.num_train_examples / c.rl.prompts_per_step)
  c.rl.warmup_steps = math.ceil(1e-4 * c.rl.steps * c.rl.num_iterations)  # d1's warmup_ratio 1e-4 (GDPO's unknown)
  c.checkpoint.every = math.ceil(100 / c.rl.num_iterations)  # d1's save_steps (GDPO's unknown)
  c.rl.eval_every = math.ceil(WD1_EVAL["every_updates"] / c.rl.num_iterations)  # as the other bases
  # Prompts, rewards and data: d1's, as _d1 sets (GDPO's README: "built on top of the D1 repository";
  # its own data code is not available offline).


# SPG's eubo_beta per task (spg/slurm_scripts/spg_mix/<task>_base_spg_mix_beta<β>_weight0.5.sbatch @ a1c7120,
# the "mix" runs of its main table); code and JSON have no SPG script: GSM8K's.
_SPG_EUBO_BETA = {"gsm8k": 1.5, "math500": 1.5, "countdown": 1.5, "sudoku": 1.0, "humaneval": 1.5, "mbpp": 1.5,
                  "json": 1.5}


def _spg(c: ml_collections.ConfigDict, task: str) -> None:
  """SPG (facebookresearch/SPG, the ``spg_mix`` runs): d1's train.yaml (SPG's ``spg/slurm_scripts/train.yaml``
  is d1's, same values) with SPG's sbatch flags on top."""
  _d1(c, task)
  # spg_trainer.py compute_loss: d1's `self._step % num_iterations` (Sudoku: a micro-batch keeps one seed)
  c.rl.mask_seed_reuse = True
  c.rl.objective = "spg"  # sbatch --trainer spg (spg_trainer.py SPGTrainer)
  c.rl.likelihood = "spg_block"  # sbatch --forward_type block_random
  c.likelihood.spg_block.num_t = 2  # sbatch --num_t 2
  c.likelihood.spg_block.block_length = 32  # train.yaml block_length 32 (forward_process reads args.block_length)
  c.likelihood.spg_block.min_t = 0.0  # sbatch --min_t 0
  c.likelihood.spg_block.max_t = 1.0  # sbatch --max_t 1
  c.likelihood.p_mask_prompt = 0.15  # train.yaml p_mask_prompt, use_mask_prompt true
  c.rl.spg.eubo_beta = _SPG_EUBO_BETA[task]  # sbatch --eubo_beta (see _SPG_EUBO_BETA)
  c.rl.spg.mix_weight = 0.5  # sbatch --logp_estimation mix --mix_weight 0.5
  c.rl.beta = 0.0  # sbatch --beta 0.0 (SPGTrainer.compute_loss raises for beta != 0)
  c.rl.advantage = "group_mean"  # spg_trainer.py _generate_and_score_completions: rewards - group mean
  c.rl.num_iterations = 4  # sbatch NUM_ITER=4
  c.rl.group_size = 6  # sbatch --num_generations 6
  if task == "sudoku":
    c.rollout.temperature = 0.3  # sudoku_new_base_spg_mix_beta1.0_weight0.5.sbatch --temperature 0.3
    # 3 rows per GPU x 8 GPUs x gradient_accumulation_steps 4 = 96 rows = 16 prompts, 4 micro-batches.
    c.rl.grad_accum = 4  # sudoku sbatch --per_device_train_batch_size 3 --gradient_accumulation_steps 4
  else:
    c.rollout.temperature = 0.9  # diffu_grpo_config.py temperature default 0.9 (the sbatch sets none)
    c.rl.grad_accum = 2  # sbatch --per_device_train_batch_size 6 --gradient_accumulation_steps 2 (96 rows = 16 prompts)
  # train.yaml warmup_ratio 1e-4, save_steps 100 and wd1's eval cadence count optimizer updates: in SPG's
  # μ = 4, not the μ of d1's sbatch that _d1 converted them with (12; Countdown, Sudoku: 8).
  c.rl.warmup_steps = math.ceil(1e-4 * c.rl.steps * c.rl.num_iterations)  # train.yaml warmup_ratio 1e-4
  c.checkpoint.every = math.ceil(100 / c.rl.num_iterations)  # train.yaml save_steps 100
  c.rl.eval_every = math.ceil(WD1_EVAL["every_updates"] / c.rl.num_iterations)  # as the other bases
  # Not expressible: Sudoku's 3-shot prompts and max_prompt_length 1500 (sbatch --few_shot 3), SPG's
  # own Sudoku split (dataset/train_sudoku_split_new.csv); d1's 4-bit base (as _d1 says).


# ESPO's KL weight per task (recipes/run_<task>_llada.sh --beta @ b5f2dac); code: run_code_llada.sh; JSON: GSM8K's.
_ESPO_BETA = {"gsm8k": 1e-3, "math500": 1e-3, "countdown": 3e-3, "sudoku": 1e-2, "humaneval": 1e-2, "mbpp": 1e-2,
              "json": 1e-3}
# ESPO's denoising steps (run_<task>_llada.sh --diffusion_steps).
_ESPO_STEPS = {"gsm8k": 256, "math500": 256, "countdown": 128, "sudoku": 128, "humaneval": 256, "mbpp": 256,
               "json": 256}


def _espo(c: ml_collections.ConfigDict, task: str) -> None:
  """ESPO (ML-GSAI/ESPO ``recipes/run_<task>_llada.sh`` on ``recipes/train.yaml``) from LLaDA-8B-Instruct."""
  _d1(c, task)  # then every RL value ESPO sets differently
  c.rl.mask_seed_reuse = False  # espo_trainer.py: seed ((_step - 1) % (mu * GA)) // GA, a new one per inner update
  c.rl.objective = "espo"  # espo_train.py ESPOTrainer: sequence ELBO ratio / L, clipped, k2 KL
  c.rl.likelihood = "espo_elbo"  # espo_trainer.py _get_elbo: stratified counts, coupled complement
  c.likelihood.elbo_terms = "summed"  # the ratio and KL are on the sequence ELBO (ESPOTrainer.compute_loss)
  c.likelihood.espo_elbo.num_mc = 2  # run_<task>_llada.sh --num_mc 2
  c.likelihood.espo_elbo.coupled = True  # train.yaml reduce_var: true
  # ESPO stratifies over the 3 rows of a device's micro-batch (forward_process); with rl.grad_accum > 1
  # the rows draw from their own keys, so the presets stratify a row's 2 draws ("batch" is refused there).
  c.likelihood.espo_elbo.stratify = "row"
  c.likelihood.espo_elbo.padding = "score"  # compute_loss applies no completion mask: the ELBO sums all L positions
  c.likelihood.p_mask_prompt = 0.0  # forward_process masks completion positions only
  c.rl.advantage = "rloo"  # _generate_and_score_completions leave_one_out = True; train.yaml scale_rewards: false
  c.rl.beta = _ESPO_BETA[task]  # run_<task>_llada.sh --beta
  c.rl.clip_eps = 0.0 if task == "countdown" else 0.2  # train.yaml epsilon 0.2; run_countdown_llada.sh --epsilon 0
  c.rl.num_iterations = 8  # run_<task>_llada.sh NUM_ITER=8
  c.rl.learning_rate = 3e-6  # run_<task>_llada.sh --learning_rate 3e-6
  c.rl.weight_decay = 0.01  # run_<task>_llada.sh --weight_decay 0.01
  c.rl.max_grad_norm = 0.2  # run_<task>_llada.sh --max_grad_norm 0.2
  c.rl.adam_b2 = 0.99  # train.yaml adam_beta2 0.99 (adam_beta1 0.9 as d1)
  c.rl.lr_schedule = "constant"  # run_<task>_llada.sh --lr_scheduler_type constant_with_warmup
  c.rollout.steps = _ESPO_STEPS[task]  # run_<task>_llada.sh --diffusion_steps
  c.rollout.block_length = 32  # espo_trainer.py generate(..., block_length=32) for LLaDA
  c.rollout.temperature = 1.0  # train.yaml generation_temperature 1.0
  c.rollout.gen_length = 256  # train.yaml max_completion_length 256
  if task in ("humaneval", "mbpp"):
    c.rl.group_size = 10  # run_code_llada.sh --num_generations 10
    c.rl.prompts_per_step = 16  # --per_device_train_batch_size 1 x 8 GPUs x --gradient_accumulation_steps 20 = 160 rows
    c.rl.grad_accum = 16  # micro-batches hold whole groups here: 16 of one prompt's 10 rows (ESPO: 20 of 8)
    c.rl.rollout_batch = 80  # run_code_llada.sh --generation_batch_size 10 per GPU x 8 GPUs
    # run_code_llada.sh sets no --learning_rate / --weight_decay: train.yaml's, not the other scripts' flags.
    c.rl.learning_rate = 1e-6  # train.yaml learning_rate 1.0e-06
    c.rl.weight_decay = 0.1  # train.yaml weight_decay 0.1
    c.rl.max_grad_norm = 0.8  # run_code_llada.sh --max_grad_norm 0.8
    c.model.lora_rank = 0  # run_code_llada.sh --use_peft false: full fine-tuning (θ_ref a frozen copy)
    c.model.lora_dropout = 0.0  # no adapters to drop (model.lora_dropout needs lora_rank > 0)
  elif task == "math500":
    c.rl.group_size = 16  # run_math_llada.sh --num_generations 16
    c.rl.prompts_per_step = 16  # --per_device_train_batch_size 2 x 8 GPUs x --gradient_accumulation_steps 16 = 256 rows
    c.rl.grad_accum = 16  # 16 micro-batches of 16 rows (ESPO's: 2 per GPU x 8 GPUs), one prompt's group each
    c.rl.rollout_batch = 64  # run_math_llada.sh --generation_batch_size 8 per GPU x 8 GPUs
  else:
    c.rl.group_size = 6  # run_<task>_llada.sh --num_generations 6
    c.rl.prompts_per_step = 16  # 3 rows per GPU x 8 GPUs x gradient_accumulation_steps 4 = 96 rows
    c.rl.grad_accum = 4  # --per_device_train_batch_size 3 --gradient_accumulation_steps 4
    c.rl.rollout_batch = 48  # --generation_batch_size 6 per GPU x 8 GPUs
  c.rl.steps = math.ceil(1 * c.sft.num_train_examples / c.rl.prompts_per_step)  # train.yaml num_train_epochs 1
  c.rl.warmup_steps = math.ceil(1e-3 * c.rl.steps * c.rl.num_iterations)  # run_<task>_llada.sh --warmup_ratio 0.001
  c.checkpoint.every = math.ceil(500 / c.rl.num_iterations)  # train.yaml save_steps 500 (optimizer updates)
  c.rl.eval_every = math.ceil(WD1_EVAL["every_updates"] / c.rl.num_iterations)  # train.yaml do_eval false: wd1's cadence
  c.seed = 42  # train.yaml seed 42
  # Not expressible: max_prompt_length 400 (prompts are not truncated here), ESPO's own data files; for
  # code, train.yaml's sync_ref_model (without PEFT TRL mixes θ_ref ← 0.6·θ + 0.4·θ_ref every 64 updates;
  # θ_ref stays the initial model here).


# BGPO's training steps per task (THU-KEG/BGPO README, "Training", as mirrored at stig.sh: "for math tasks,
# we train for 700 steps; for coding tasks, 5 epochs (112 steps per epoch); for Sudoku and Countdown, 400 and
# 560 steps"). One step is one rollout batch and, with μ = 1, one update. JSON has no BGPO run: d1's bound.
_BGPO_STEPS = {"gsm8k": 700, "math500": 700, "humaneval": 560, "mbpp": 560, "sudoku": 400, "countdown": 560}
_CODE_TASKS = ("humaneval", "mbpp")


def _bgpo(c: ml_collections.ConfigDict, task: str) -> None:
  """BGPO (Lin et al. 2025): its linear lower bound of the ELBO ratio over n_t Monte-Carlo samples,
  back-propagated one sample at a time; its training steps, and on the code tasks its model card's
  lengths and learning rate; everything else its sources do not state (offline) is d1's."""
  _d1(c, task)
  c.rl.mask_seed_reuse = False  # BGPO's code could not be read (and mu = 1): a new draw per update
  c.rl.objective = "bgpo"  # arXiv 2510.11683: Taylor bound for A >= 0, Jensen bound for A < 0 (daca_jax.rl.methods.bgpo)
  c.rl.likelihood = "elbo_mc"  # arXiv 2510.11683: the ELBO by Monte-Carlo samples (t, masked y_t), one pass each
  c.likelihood.elbo_mc.samples = 16  # bgpo-code: n_t 16 (unsourced for the other tasks: their cards are not readable offline)
  c.rl.pass_accum = True  # arXiv 2510.11683: each sample's gradient accumulated on its own (constant memory in n_t)
  c.likelihood.strata_batch = 1  # library choice: θ_ref's / θ_old's no-gradient log-probs one sample at a time too
  c.rl.num_iterations = 1  # arXiv 2510.11683 abstract: the bound's value and gradient equal the ELBO objective's "in on-policy training"
  c.rl.steps = _BGPO_STEPS.get(task, c.rl.steps)  # bgpo (README): see _BGPO_STEPS (JSON: d1's 10-epoch bound)
  if task in _CODE_TASKS:
    c.rl.learning_rate = 5e-7  # bgpo-code: learning rate 5e-7
    c.rollout.gen_length = 512  # bgpo-code: response length 512
    c.rollout.steps = 512  # bgpo-code: train diffusion steps 512
    c.rollout.block_length = 32  # bgpo-code: block size 32 (its batch size 16 is d1's 16 prompts if it counts prompts)
  # _d1 derived these from d1's μ; BGPO's μ = 1 makes each rollout one optimizer update.
  c.rl.warmup_steps = math.ceil(1e-4 * c.rl.steps * c.rl.num_iterations)  # d1's warmup_ratio 1e-4 (BGPO's unknown)
  c.checkpoint.every = math.ceil(100 / c.rl.num_iterations)  # d1's save_steps 100 optimizer updates (BGPO's unknown)
  # library choice: the other bases' 1000-update cadence (wd1's) would not come round in BGPO's 400-700
  # updates, so validation runs with each checkpoint (every 100 updates).
  c.rl.eval_every = c.checkpoint.every
  # UNSOURCED (BGPO's code could not be read; none of these is in its paper's abstract or README): the k3 KL
  # with beta 0.04 and the clip eps 0.5 (d1's), r - group-mean advantages (d1's), the raw ELBO difference
  # delta_j (not length-normalised, daca_jax.rl.methods.bgpo), t_j stratified over [1e-3, 1] (daca_jax.likelihood.
  # elbo_mc, LLaDA's forward-process floor), n_t = 16 off the code tasks (bgpo-code's value), the group size,
  # batch and schedule, and the learning rate 3e-6 off the code tasks (d1's, _d1).


# MAP's recipe per task: map/configs/<file>.yaml (gsm8k and math only; the other tasks take gsm8k's).
_MAP_K = {"math500": 8}  # math.yaml stepmerge_sample_k_blocks 8 (gsm8k.yaml: 12)


def _map(c: ml_collections.ConfigDict, task: str) -> None:
  """Mask-Aware Policy Gradient (map/configs/gsm8k.yaml; math.yaml for MATH500), on d1's trainer
  settings where the yaml repeats them (its trainer is d1's diffu-GRPO trainer, adapted)."""
  _d1(c, task)
  # map/trainer.py compute_loss: d1's `self._step % num_iterations` (a row sees 3 of the 12 segment draws)
  c.rl.mask_seed_reuse = True
  c.rl.objective = "map"  # gsm8k.yaml loss_type gspo, position_loss_type gspo, use_position_likelihood true
  c.rl.likelihood = "stepmerge"  # gsm8k.yaml use_stepmerge true
  c.likelihood.stepmerge.segments = 32  # gsm8k.yaml num_stepmerge_blocks 32
  c.likelihood.stepmerge.sample = _MAP_K.get(task, 12)  # gsm8k.yaml stepmerge_sample_k_blocks 12 (math.yaml: 8)
  c.likelihood.stepmerge.position = True  # gsm8k.yaml use_position_likelihood true
  c.likelihood.stepmerge.position_method = "softmax"  # gsm8k.yaml position_likelihood_method
  c.likelihood.stepmerge.position_scope = "segment"  # gsm8k.yaml position_likelihood_scope
  c.likelihood.stepmerge.position_confidence = "max_logit"  # gsm8k.yaml position_likelihood_confidence
  c.likelihood.stepmerge.position_source = "gt"  # gsm8k.yaml position_confidence_source
  c.likelihood.stepmerge.position_temperature = 1.0  # gsm8k.yaml position_likelihood_temperature
  # map/trainer.py _get_per_token_logps_stepmerge: block n scores unmask steps (n·T//N, (n+1)·T//N], counted from 0
  c.likelihood.stepmerge.segment_convention = "map"
  c.likelihood.strata_batch = 1  # gsm8k.yaml stepmerge_blocks_per_microbatch 1
  c.rl.map.position_weight = 1.0  # gsm8k.yaml position_likelihood_lambda
  c.rl.clip_eps = 3e-4  # gsm8k.yaml clip_eps_low and position_clip_eps_low 0.0003
  c.rl.map.clip_eps_high = 4e-4  # gsm8k.yaml clip_eps_high and position_clip_eps_high 0.0004
  c.rl.beta = 0.0  # gsm8k.yaml beta
  c.rl.num_iterations = 12  # gsm8k.yaml num_iterations
  c.rl.advantage = "rloo"  # gsm8k.yaml advantage_estimator rloo: r - mean of the other G-1 rows
  c.rl.group_size = 4  # gsm8k.yaml num_generations
  # per_device_train_batch_size 1 x 8 processes (train_gsm8k.sh NUM_PROCESSES 8) x gradient_accumulation_steps 4
  # = 32 completions = 8 prompts of 4.
  c.rl.prompts_per_step = 8
  c.rl.grad_accum = 4  # gsm8k.yaml gradient_accumulation_steps
  c.rl.rollout_batch = 16  # library choice (memory); gsm8k.yaml generation_batch_size 6 does not divide 32 rows
  c.rl.steps = math.ceil(10 * c.sft.num_train_examples / c.rl.prompts_per_step)  # gsm8k.yaml num_train_epochs 10 (upper bound)
  c.rl.warmup_steps = math.ceil(1e-4 * c.rl.steps * c.rl.num_iterations)  # gsm8k.yaml warmup_ratio 0.0001
  c.checkpoint.every = math.ceil(100 / c.rl.num_iterations)  # gsm8k.yaml save_steps 100
  c.rl.eval_every = math.ceil(WD1_EVAL["every_updates"] / c.rl.num_iterations)  # as the other bases
  # lr 3e-6, constant with warmup, weight decay 0.1, grad norm 0.2, betas 0.9/0.99, LoRA 128/64/0.05,
  # lengths 256/32/128, temperature 0.9, seed 42: gsm8k.yaml's values, which _d1 already sets.


def _arm(c: ml_collections.ConfigDict, arm: str) -> None:
  """DACA's arms (arXiv 2605.16342): DPS credit and/or SML likelihood, at this library's defaults
  (the paper's alpha, clip and K are not available offline)."""
  if arm in ("dps", "daca"):
    c.rl.credit = "dps"  # DPS with credit.dps.* defaults: alpha 0.5, weights clipped to [0.5, 2.0] (configs/base.py)
  if arm in ("sml", "daca"):
    c.rl.likelihood = "stratified"  # SML with likelihood.stratified.* defaults: K = 4 random strata (configs/base.py)
    if c.rl.objective == "bgpo":
      c.rl.pass_accum = False  # library: SML's strata are parts of one sample, so BGPO's Jensen term spans every pass


def _smoke(c: ml_collections.ConfigDict) -> None:
  """The same recipe at CPU size: 2 iterations of a few prompts, short completions and evaluation
  lengths, a small LoRA (a full fine-tuning recipe stays one). The model is the tiny checkpoint passed
  as the real one is (``--config.model.init_checkpoint=DIR``); no architecture is set here either."""
  c.model.dtype = "float32"  # CPU
  c.model.param_dtype = "float32"
  c.model.remat = "none"
  if c.model.lora_rank:  # a full fine-tuning recipe (ESPO's code runs) stays one
    c.model.lora_rank = 4  # alpha / rank kept at the recipe's 0.5
    c.model.lora_alpha = 2.0
  c.rollout.gen_length = 64  # two blocks of 32, length / 2 steps (d1's ratio)
  c.rollout.steps = 32
  c.rl.steps = 2
  c.rl.prompts_per_step = 2
  c.rl.group_size = 2
  c.rl.num_iterations = 2  # μ > 1 still exercised
  c.rl.grad_accum = 2  # batch 4 in two micro-batches
  c.rl.rollout_batch = 2  # rollouts in two calls
  c.rl.warmup_steps = 1
  c.rl.eval_every = 2
  c.eval.gen_lengths = "32,64"  # d1's protocol at two tiny lengths (blocks of 32, length / 2 steps)
  c.eval.batch_size = 4
  c.sft.num_train_examples = 8
  c.task.num_val_examples = 2
  c.task.num_eval_examples = 2
  c.task.eval_size = 8
  c.checkpoint.every = 1
  c.log.plumbing_check = True
  c.log.trajectory_every = 0


def get_config(preset: str = "d1_gsm8k") -> ml_collections.ConfigDict:
  """Returns the config of ``preset`` (see the module docstring for the names).

  Raises:
    ConfigError: an unknown name; the message gives the pattern.
  """
  base_name, task, arm, smoke = parse_name(preset)
  c = base.get_config()
  {"d1": _d1, "wd1": _wd1, "gdpo": _gdpo, "spg": _spg, "espo": _espo, "bgpo": _bgpo, "map": _map}[base_name](c, task)
  _arm(c, arm)
  if smoke:
    _smoke(c)
  return c
