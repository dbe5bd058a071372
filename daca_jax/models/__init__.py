"""Models: the LLaDA-architecture transformer and its pure ``LogitsFn``."""
from daca_jax.models.llada import (LogitsFn, ModelConfig, Params, Transformer, count_params, init_model,
                                   llada_8b_config, make_head_fn, make_hidden_fn, make_logits_fn,
                                   tiny_config)
