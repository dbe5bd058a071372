"""The fields every task config starts from: a tiny byte-level LLaDA-architecture model and DACA-GRPO
(diffu-GRPO + DPS + SML). Each field's meaning is documented here and in the dataclasses of
``daca_jax/config/`` (a module per section; a method's own sub-section, e.g. ``credit.dps``, in the method's
module, ``daca_jax/credit/dps.py``); a task config (``configs/<task>_tiny.py``) imports this and changes what its task
needs. Not a runnable config by itself (no task settings).
"""
import ml_collections


def get_config() -> ml_collections.ConfigDict:
  """Returns every config field at its tiny-model default."""
  c = ml_collections.ConfigDict()
  c.seed = 0  # Seeds model init, data order, rollout and likelihood keys.

  c.model = ml_collections.ConfigDict()
  c.model.vocab_size = 260  # Byte tokenizer: 256 bytes + pad, mask, eos, bos.
  c.model.d_model = 128  # Residual width D.
  c.model.n_layers = 4  # Transformer blocks.
  c.model.n_heads = 4  # Attention heads (head_dim = 32).
  c.model.n_kv_heads = 0  # GQA key/value heads; 0 = n_heads.
  c.model.mlp_dim = 384  # SwiGLU hidden width.
  c.model.rope_theta = 10000.0  # RoPE base (LLaDA-8B uses 500000 for its 4k context).
  c.model.norm_eps = 1e-5  # RMSNorm epsilon.
  c.model.tie_embeddings = False  # LLaDA unties the output projection.
  c.model.dtype = "float32"  # Compute dtype ("bfloat16" on accelerators).
  c.model.param_dtype = "float32"  # Parameter dtype.
  c.model.remat = "none"  # Per-layer remat: none | full | dots | dots_saveable.
  c.model.mask_token_id = 257  # [MASK] id of the byte tokenizer.
  c.model.qkv_bias = False  # q/k/v biases (Dream); LLaDA has none.
  c.model.shift_logits = False  # Dream reads position i's logits from position i-1.
  c.model.lora_rank = 0  # RL with LoRA adapters of this rank on the SFT model (0: full fine-tuning).
  c.model.lora_alpha = 16.0  # LoRA scale numerator (adapter output × alpha / rank).
  c.model.lora_targets = "q,k,v,o,gate,up,down"  # Projections that get adapters.
  c.model.lora_dropout = 0.0  # Dropout on the LoRA adapters' input during updates (d1: 0.05).
  c.model.init_checkpoint = ""  # Local HF checkpoint folder RL starts from ("" = the tiny model + SFT).
  c.model.require_checkpoint = False  # True: refuse to run without model.init_checkpoint (configs/paper.py's recipes).
  c.model.logprob_chunk = 0  # Gather target log-probs this many positions at a time (0: all at once).
  c.model.unroll_layers = False  # Unrolled layer stack (slower compile; full XLA FLOP counts).
  c.model.vocab_limit = 0  # The sampler proposes ids below this (0: vocab_size), never [MASK].
  c.model.left_pad_id = -1  # -1: pads attended (LLaDA); an id: leading pads masked out (Dream).

  c.rollout = ml_collections.ConfigDict()
  c.rollout.gen_length = 20  # L completion tokens (task configs set what their answers need).
  c.rollout.block_length = 20  # Semi-autoregressive block; = gen_length: one block.
  c.rollout.steps = 10  # S denoising steps = model calls; gen_length / steps tokens committed per step.
  c.rollout.temperature = 1.0  # Gumbel-max temperature of RL rollouts (0 = greedy).
  c.rollout.remasking = "low_confidence"  # low_confidence | random.
  c.rollout.threshold = 0.0  # Fast-dLLM parallel decoding: commit every position above it (0: off).
  c.rollout.kv_cache = "none"  # Block-wise K/V cache: none | prefix | dual.

  c.credit = ml_collections.ConfigDict()  # One section per assigner (rl.credit picks which runs).
  c.credit.dps = ml_collections.ConfigDict()
  c.credit.dps.alpha = 0.5  # DPS (and DTCA, built on it): w = clip(1 + alpha * z, w_min, w_max).
  c.credit.dps.w_min = 0.5  # Lower clip of DPS weights.
  c.credit.dps.w_max = 2.0  # Upper clip of DPS weights.
  c.credit.dps.scope = "all"  # Step progress over all remaining masked positions | current "block".
  c.credit.dps.signal = "confidence"  # Certainty measure of step progress: confidence | neg_entropy.
  c.credit.dps.self_term = 0.0  # λ: add the token's own confidence rise to its raw score.
  c.credit.dtca = ml_collections.ConfigDict()
  c.credit.dtca.tagger = "rule"  # DTCA token categories: rule (NUM/OP/PUNCT/WORD/SPECIAL) | pos.
  c.credit.dtca.top_frac = 0.4  # DTCA μ: share of denoising states (steps) trained on.
  c.credit.dtca.entropy_window = 10  # DTCA: updates forming the entropy baseline (0: no calibration).
  c.credit.dtca.calib_min = 0.5  # DTCA: lower clip of the entropy calibration factor.
  c.credit.dtca.calib_max = 2.0  # DTCA: upper clip of that factor.
  c.credit.delta = ml_collections.ConfigDict()
  c.credit.delta.lambda_min = 0.8  # DelTA λmin.
  c.credit.delta.lambda_max = 1.2  # DelTA λmax.
  c.credit.delta.gamma = 1.0  # DelTA γ: sigmoid temperature, in units of each side's margin std.
  c.credit.contrast = ml_collections.ConfigDict()
  c.credit.contrast.alpha = 1.0  # Signed contrast: e = base + alpha * |A| * z (z: the signal standardised).
  c.credit.contrast.signal = "commit_conf"  # Contrasted record: commit_conf | dps (raw DPS score).
  c.credit.contrast.baseline = "sequence"  # z from the row's mean | "position": the group's mean there.
  c.credit.contrast.base = "sequence"  # Added to: the rollout's advantage | position_value's.
  c.credit.position_value = ml_collections.ConfigDict()
  c.credit.position_value.weights = "none"  # Times each token's position value: none | dps (DPS weights).
  c.credit.drop_agreed = False  # Any assigner: weight 0 on tokens all G rollouts of a group put at the same position.

  c.likelihood = ml_collections.ConfigDict()  # Shared options, then one section per estimator.
  c.likelihood.p_mask_prompt = 0.0  # Prompt-token masking probability (d1 reproductions: 0.15).
  c.likelihood.elbo_terms = "per_target"  # elbo/coupled: ratio+KL per scored log-prob | summed (DiffuCoder).
  c.likelihood.strata_batch = 0  # Multi-pass estimators: 0 vmaps all passes; n: n at a time, rematerialised.
  c.likelihood.trajectory_steps = 0  # trajectory/rldf: rollout steps to rebuild (0 = rollout.steps).
  c.likelihood.stratified = ml_collections.ConfigDict()
  c.likelihood.stratified.num_strata = 4  # K strata of SML.
  c.likelihood.stratified.partition = "random"  # random | per_prompt | strided | contiguous | commit_order.
  c.likelihood.coupled = ml_collections.ConfigDict()
  c.likelihood.coupled.t_min = 0.2  # coupled: masking rate t ~ U[t_min, t_max] (DiffuCoder).
  c.likelihood.coupled.t_max = 0.8  # coupled: upper end of t.
  c.likelihood.coupled.full_pass = True  # coupled: average with the fully-masked pass (DiffuCoder).
  c.likelihood.elbo = ml_collections.ConfigDict()
  c.likelihood.elbo.nodes = 2  # elbo: Gauss-Legendre nodes in t (GDPO: 2-3).
  c.likelihood.trajectory = ml_collections.ConfigDict()
  c.likelihood.trajectory.groups = 0  # trajectory: passes over runs of consecutive steps (0 = one per step).
  c.likelihood.rldf = ml_collections.ConfigDict()
  c.likelihood.rldf.states = 4  # rldf: rollout states rebuilt per sequence (one pass each).
  c.likelihood.rldf.sampling = "softmax"  # rldf: softmax of step surprisal | uniform | topk.
  c.likelihood.rldf.temperature = 1.0  # rldf: T of the softmax state sampling.
  c.likelihood.spg_block = ml_collections.ConfigDict()
  c.likelihood.spg_block.num_t = 2  # spg_block: block-masked contexts (passes) per sequence (SPG: 2).
  c.likelihood.spg_block.block_length = 0  # spg_block: positions per block, dividing rollout.gen_length (0: rollout.block_length).
  c.likelihood.spg_block.min_t = 0.0  # spg_block: fewest masked in the chosen block, fraction of its valid positions.
  c.likelihood.spg_block.max_t = 1.0  # spg_block: most masked in the chosen block, that fraction.
  c.likelihood.espo_elbo = ml_collections.ConfigDict()
  c.likelihood.espo_elbo.num_mc = 1  # espo_elbo: mask draws averaged (ESPO's recipes: 2).
  c.likelihood.espo_elbo.coupled = True  # espo_elbo: also score each mask's complement (ESPO reduce_var).
  c.likelihood.espo_elbo.stratify = "row"  # espo_elbo: mask counts stratified over a row's draws | batch (ESPO's; grad_accum 1 only).
  c.likelihood.espo_elbo.padding = "mask"  # rl.objective=espo: the completion mask's positions | score (ESPO's: all L, padding too).
  c.likelihood.elbo_mc = ml_collections.ConfigDict()
  c.likelihood.elbo_mc.samples = 16  # elbo_mc (BGPO): n_t Monte-Carlo samples of the ELBO, one pass each.
  c.likelihood.elbo_mc.stratified_t = True  # elbo_mc: t_j in the j-th of n_t equal bins (else i.i.d.).
  c.likelihood.stepmerge = ml_collections.ConfigDict()
  c.likelihood.stepmerge.segments = 32  # stepmerge (MAP): N runs of consecutive steps, one pass each.
  c.likelihood.stepmerge.sample = 0  # stepmerge: K of the N segments scored per update (0: all).
  c.likelihood.stepmerge.position = True  # stepmerge: also the unmasking-position log-probs (objective map).
  c.likelihood.stepmerge.position_method = "softmax"  # stepmerge: softmax (Plackett-Luce) | bradley_terry.
  c.likelihood.stepmerge.position_scope = "segment"  # stepmerge: competitors in later segments | position (+ later steps).
  c.likelihood.stepmerge.position_confidence = "max_logit"  # stepmerge: competitors' confidence: max_logit | top_prob.
  c.likelihood.stepmerge.position_source = "gt"  # stepmerge: the token's own: gt (its logit / prob) | max.
  c.likelihood.stepmerge.position_temperature = 1.0  # stepmerge: tau of the position scores.
  c.likelihood.stepmerge.segment_convention = "d2"  # stepmerge: d2 [start, next) | map (start, next], from step 0.

  c.rl = ml_collections.ConfigDict()
  c.rl.objective = "diffu_grpo"  # Base method: diffu_grpo | wd1 | gdpo | gspo | reinforce_pp | rldf | spg | espo.
  c.rl.credit = "dps"  # uniform | dps (DACA's Denoising Progress Scores) | dtca | delta | position_value | token_reward.
  # mean_field (d1) | stratified (DACA's SML) | coupled | elbo | trajectory | rldf | spg_block (SPG) | espo_elbo (ESPO).
  c.rl.likelihood = "stratified"
  c.rl.steps = 150  # RL iterations (one rollout batch each).
  c.rl.prompts_per_step = 8  # Distinct prompts per iteration.
  c.rl.group_size = 8  # G completions per prompt; batch = 64.
  c.rl.sample_group_size = 0  # n >= G sampled per prompt, G of them trained on (PODS); 0: n = G.
  c.rl.downsample = "max_variance"  # Which G of the n: max_variance (PODS) | random.
  c.rl.num_iterations = 1  # μ updates per rollout batch (d1 uses 12 at scale; 1 is cheapest on a CPU).
  c.rl.clip_eps = 0.5  # PPO ratio clip ε (d1).
  c.rl.beta = 0.04  # k3 KL penalty to the SFT reference (d1).
  c.rl.normalize_adv_std = False  # d1 uses r - mean(r) without dividing by the std.
  # Advantage estimator: "" = the objective's own (reinforce_pp's, else group_mean, or group_std with
  # normalize_adv_std; espo's: rloo) | group_mean (d1) | group_std (GRPO) | batch_whiten | reinforce_pp | rloo.
  c.rl.advantage = ""
  c.rl.learning_rate = 1e-4  # Peak AdamW learning rate.
  c.rl.warmup_steps = 5  # Linear warmup (optimizer updates).
  c.rl.lr_schedule = "constant"  # After warmup: constant | cosine (to 10% of the peak at the last update).
  c.rl.weight_decay = 0.0  # AdamW weight decay.
  c.rl.max_grad_norm = 1.0  # Global-norm gradient clip.
  c.rl.adam_eps = 1e-8  # Adam epsilon.
  c.rl.adam_b1 = 0.9  # Adam beta1 (first-moment decay).
  c.rl.adam_b2 = 0.999  # Adam beta2 (second-moment decay; d1: 0.99).
  c.rl.grad_accum = 1  # Micro-batches per update, gradients summed before one optimizer step (d1: 2).
  c.rl.rollout_batch = 0  # Rows per rollout call (0: the whole batch at once).
  c.rl.eval_every = 0  # Evaluate on the validation split every N iterations (0: never; needs task.num_val_examples).
  c.rl.replicate = 0  # RL's draw of rollout keys and prompt order: 0 = the seed's own | k > 0: another, same warm start.
  c.rl.grad_agreement = True  # Log grad_cos: cosine of successive batches' gradients (one params-sized buffer).
  c.rl.spg = ml_collections.ConfigDict()
  c.rl.spg.eubo_beta = 1.5  # spg: β of the upper bound's power mean (SPG: 1.5; Sudoku 1.0).
  c.rl.spg.mix_weight = 0.5  # spg: ω, the upper bound's share for A <= 0 (1: EUBO only, 0: ELBO only).
  c.rl.pass_accum = False  # Accumulate the gradient one likelihood pass at a time (BGPO; pass-local objectives).
  c.rl.mask_seed_reuse = False  # The μ inner updates' mask seeds as d1's/SPG's/MAP's trainers index them.
  c.rl.map = ml_collections.ConfigDict()
  c.rl.map.clip_eps_high = 0.0  # map: upper clip 1 + eps_high of the sequence ratios (0: clip_eps).
  c.rl.map.position_weight = 1.0  # map: lambda of the position loss.
  c.rl.rldf = ml_collections.ConfigDict()
  c.rl.rldf.tau = 0.6  # rldf: drop (state, token) targets below this probability unless committed there.

  c.sft = ml_collections.ConfigDict()
  c.sft.steps = 300  # Warm-start steps (masked-diffusion SFT on the task's generated targets).
  c.sft.batch_size = 64  # Sequences per SFT step.
  c.sft.learning_rate = 1e-3  # Peak AdamW rate (cosine decay to 10%).
  c.sft.warmup_steps = 50  # Linear warmup steps.
  c.sft.weight_decay = 0.01  # AdamW weight decay.
  c.sft.max_grad_norm = 1.0  # Global-norm gradient clip.
  c.sft.num_train_examples = 20000  # Size of the generated training pool (eval items excluded).

  c.task = ml_collections.ConfigDict()
  c.task.name = "sudoku4x4"  # Registered task (task configs set it).
  c.task.num_blanks = 8  # sudoku4x4: blanks per generated training puzzle (d1's test set has 8).
  c.task.eval_path = ""  # "" = the task's benchmark file under data_dir if present, else generated.
  c.task.eval_size = 500  # Size of the generated fallback evaluation set.
  c.task.num_eval_examples = 0  # Evaluate on the first N examples only (0 = all).
  c.task.num_val_examples = 0  # Validation split held out of the training pool (rl.eval_every uses it).
  # pool: the validation items follow the training items in the pool of `seed` (one split per warm start) | fixed:
  # num_val_examples items generated once from task.val_seed, the same for every seed, removed from every pool.
  c.task.val_split = "pool"
  c.task.val_seed = 20261205  # Generator seed of a fixed validation split.
  c.task.options = ml_collections.ConfigDict()  # Task options: the names the task declares (its OPTIONS).
  c.task.reward = ""  # RL's reward: "" = the task's graded reward | d1 | d1_dotall (d1's training rewards).
  # RL's prompt style when it differs from evaluation's (task.options.prompt_style): "" = the same | d1_train
  # (d1's training prompts). The job then builds a training and an evaluation view of the task.
  c.task.train_prompt_style = ""

  c.data = ml_collections.ConfigDict()
  c.data.source = "local"  # local: the files under data_dir | tfds: the TFDS datasets built from them.
  c.data.data_dir = ""  # "" = $DACA_DATA_DIR or ../shared/data beside the repository.
  c.data.tfds_dir = ""  # data.source=tfds: where experiments/build_tfds.py built the datasets.

  c.eval = ml_collections.ConfigDict()
  c.eval.batch_size = 250  # Prompts per decoding call.
  c.eval.temperature = 0.0  # d1 protocol: greedy.
  # rollout: decode at rollout.* (gen_length, block, steps; always exact: no kv_cache, no threshold) | d1: d1's
  # protocol at each of eval.gen_lengths (low-confidence remasking, eval.block_length, eval.steps), every length
  # reported as L<length>/<metric>.
  c.eval.protocol = "rollout"
  c.eval.gen_lengths = "128,256,512"  # d1 protocol: completion lengths (comma-separated; d1's tables).
  c.eval.block_length = 32  # d1 protocol: semi-autoregressive block.
  c.eval.steps = 0  # d1 protocol: denoising steps at every length (0: length / 2, d1's).

  c.parallel = ml_collections.ConfigDict()
  c.parallel.strategy = "none"  # none (one device) | pmap (data-parallel) | fsdp (sharded params + Adam).
  c.parallel.data = 0  # Mesh 'data' axis size (0: the devices left after fsdp x tensor).
  c.parallel.fsdp = 1  # Mesh 'fsdp' axis size.
  c.parallel.tensor = 1  # Mesh 'tensor' axis size (reserved: 1).
  c.parallel.rollout_weights = "auto"  # FSDP rollout: gathered (once per call) | sharded (per layer per step) | auto.
  c.parallel.distributed = False  # jax.distributed.initialize() (multi-host; also when JAX_COORDINATOR_ADDRESS is set).

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.every = 10  # RL checkpoint interval (iterations); always at the end.
  c.checkpoint.sft_every = 200  # SFT checkpoint interval (steps); always at the end.
  c.checkpoint.max_to_keep = 2  # Checkpoints kept per phase.

  c.log = ml_collections.ConfigDict()
  c.log.tensorboard = True  # TensorBoard event files in WORKDIR/tb (tensorboard --logdir WORKDIR).
  c.log.wandb = ""  # Weights & Biases project ("" = off; needs `pip install wandb`).
  c.log.trajectory_every = 50  # Trajectory image on the dashboards every N RL iterations and at the end (0: off).
  c.log.plumbing_check = False  # Say that this run is a plumbing check (smoke presets) with near-zero metrics.

  return c


def apply_smoke(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """The ``smoke`` preset shared by the tiny task configs: a 1-layer model and a few steps (< 1 min)."""
  c.model.d_model = 32
  c.model.n_layers = 1
  c.model.n_heads = 2
  c.model.mlp_dim = 64
  c.rollout.steps = 4
  c.sft.steps = 40
  c.sft.batch_size = 16
  c.sft.learning_rate = 3e-3
  c.sft.warmup_steps = 2
  c.sft.num_train_examples = 200
  c.rl.steps = 3
  c.rl.prompts_per_step = 2
  c.rl.group_size = 4
  c.rl.sample_group_size = 0  # no down-sampling: a task config's recipe is not what a smoke run checks
  c.rl.warmup_steps = 0
  c.task.num_eval_examples = 32
  c.eval.batch_size = 32
  c.checkpoint.every = 2
  c.checkpoint.sft_every = 10
  c.log.plumbing_check = True
  c.log.trajectory_every = 0  # drawing an image costs seconds of a < 1 min budget (tests draw theirs)
  return c
