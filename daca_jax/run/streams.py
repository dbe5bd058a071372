"""The seed's random streams: one per phase of the main job.

Every PRNG key and data order of the job folds one of these into ``PRNGKey(seed)`` (or numpy's
``default_rng([seed, stream, ...])``). They are distinct, so the phases draw independently of each other,
and fixed, so a resumed run (and a rerun by a later version) draws what the first run drew.
"""

SFT_STREAM = 1  # SFT batches and masking keys (run.sft_loop)
RL_STREAM = 2  # RL prompts, rollout and update keys (run.rl_loop)
EVAL_STREAM = 3  # evaluation decoding keys (run.job_eval, through run.pipeline)
LORA_STREAM = 4  # the LoRA adapters' initial values (run.pipeline)
