"""The benchmark run of ``experiments/benchmark.py``: the chosen sections, in their fixed order, on one
:class:`~daca_jax.measure.bench.Bench`, every figure gathered into one table (and a JSON file)."""
from __future__ import annotations

import time
from typing import Any, Callable

import jax

from daca_jax.errors import ConfigError
from daca_jax.io_utils import atomic_write_json
from daca_jax.measure import bench_sampler, bench_sft, bench_update
from daca_jax.measure import benchmarking as bm
from daca_jax.measure.bench import Bench, BenchOptions
from daca_jax.models import count_params
from daca_jax.run.metrics import format_table

# Each section adds its figures to the results dict; they run in this order.
SECTION_FNS: dict[str, Callable[[Bench, dict[str, Any]], None]] = {
    "rollout": bench_sampler.section_rollout,
    "profile": bench_sampler.section_profile,
    "fast": bench_sampler.section_fast,
    "likelihood": bench_update.section_likelihood,
    "memory": bench_update.section_memory,
    "peak8b": bench_sampler.section_peak8b,
    "scaling": bench_update.section_scaling,
    "torch": bench_sampler.section_torch,
    "costs": bench_update.section_costs,
    "accuracy": bench_sft.section_accuracy,
    "rl_iteration": bench_sft.section_rl_iteration,
}
SECTIONS = tuple(SECTION_FNS)
# What runs without ``--sections`` ("all" adds the slow accuracy and rl_iteration).
DEFAULT_SECTIONS = "rollout,profile,fast,likelihood,memory,scaling,torch,costs"


def choose_sections(sections: str, opts: BenchOptions) -> tuple[str, ...]:
  """The sections ``--sections`` names (``all``: every one), checked before any model is built.

  Raises:
    ValueError: an unknown section, or a bad ``--rl_modes`` for ``rl_iteration``; the message is the
      error line (the flag and what is allowed).
  """
  chosen = SECTIONS if sections == "all" else tuple(s.strip() for s in sections.split(",") if s.strip())
  unknown = [s for s in chosen if s not in SECTIONS]
  if unknown:
    raise ValueError(f"--sections: unknown {unknown}; choose from {list(SECTIONS)} or 'all'")
  if "rl_iteration" in chosen:  # a bad mode is refused before the model is built
    try:
      bench_sft.check_rl_modes(opts)
    except ConfigError as e:
      raise ValueError(f"--{e}") from None
  return chosen


def run_benchmark(config: Any, opts: BenchOptions, chosen: tuple[str, ...], json_path: str = "") -> dict[str, Any]:
  """Runs the ``chosen`` sections on the model of ``config`` and ``opts``, prints every figure as one table
  (and the rollout MFU), and returns the figures.

  Args:
    config: the training config (``--config``).
    opts: the benchmark's options.
    chosen: sections of :data:`SECTIONS` (:func:`choose_sections`).
    json_path: also write the figures there, after every section (a run cut short keeps what it measured).
  """
  bench = Bench(config, opts)
  if opts.model == "llada_8b":
    dropped = [s for s in chosen if s not in ("rollout", "fast")]
    if dropped:
      print(f"--model=llada_8b runs only the rollout and fast sections; skipping {dropped}")
    chosen = tuple(s for s in chosen if s in ("rollout", "fast"))
  rc = bench.cfg.rollout
  res = {"backend": jax.default_backend(), "device": jax.devices()[0].device_kind,
         "model": opts.model, "params": count_params(bench.params),
         "matmul_params": bm.matmul_params(bench.cfg.model), "init_s": bench.init_s, "batch": bench.b,
         "prompt_len": bench.p, "gen_length": rc.gen_length, "block_length": rc.block_length,
         "steps": rc.steps, "temperature": rc.temperature,
         "peak_tflops": bench.peak / 1e12 if bench.peak else "n/a"}
  for name in SECTIONS:
    if name in chosen:
      t0 = time.perf_counter()
      SECTION_FNS[name](bench, res)
      res[f"section_{name}_s"] = time.perf_counter() - t0
      if json_path:  # after every section, so that a run cut short keeps what it measured
        atomic_write_json(json_path, res)
  print(format_table([[k, v] for k, v in res.items()], ["figure", "value"]))
  if "rollout_mfu" in res:
    mfu = res["rollout_mfu"]
    print(f"rollout MFU: {mfu if isinstance(mfu, str) else f'{100 * mfu:.1f}%'} "
          f"({res['rollout_model_tflops_per_s']:.2f} model TFLOP/s)")
  return res
