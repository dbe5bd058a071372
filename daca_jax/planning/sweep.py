"""The settings ``experiments/plan.py --sweep`` and ``--paper_sweep`` plan, one process each.

Each setting is compiled by the script itself in a fresh process (its own set of simulated devices) and
appended to the results file, so a sweep resumes where it stopped: a setting already there is kept.
"""
from __future__ import annotations

import json
import pathlib
import subprocess
import time
from typing import Any, Mapping, Sequence

from daca_jax.errors import DataError
from daca_jax.io_utils import atomic_write_json, read_json
from daca_jax.planning.report import PAPER_SCALE, PAPER_TARGETS, TABLE_TARGETS, entry_target, paper_record
from daca_jax.planning.targets import TARGETS

# docs/scaling.md's table: (num_devices, method, lora_rank, extra flags). 8 devices serve the 8-GPU nodes
# and v5e-8; 4 devices are a v5p-8 slice (4 chips); 16 and 64 devices are 2 and 8 GPU nodes or a v5p-32 /
# v5p-128 slice (B 64: one sequence per device at 64).
SWEEP = ([(n, m, r, {}) for n in (8, 4) for m in ("daca", "d1") for r in (0, 128)]
         # candidates: SML keeping one stratum's activations at a time; two 8-GPU nodes / a v5p-32
         + [(n, "daca", r, {"strata_batch": 1}) for n in (8, 4) for r in (0, 128)]
         # the rollout gathering each layer per model call: for devices too small to hold the gathered
         # model beside the rest (v5e-8, whose column reads the 8-device settings planned for an H100)
         + [(8, m, r, {"rollout_weights": "sharded"}) for m in ("daca", "d1") for r in (0, 128)]
         + [(8, "daca", r, {"strata_batch": 1, "rollout_weights": "sharded"}) for r in (0, 128)]
         + [(n, m, r, {}) for n in (16, 64) for m in ("daca", "d1") for r in (0, 128)])
# docs/scaling.md's table compiled by each machine's own compiler: (target, method, lora_rank, extra flags), the
# four rows on every column's target, SML one stratum at a time where memory is tightest (the 8-device nodes and
# v5p-8), and on a v5e-8 (16 GB a chip) the rollout gathering each layer per model call as well.
TARGET_SWEEP = ([(t, m, r, {}) for t in TABLE_TARGETS.values() for m in ("daca", "d1") for r in (0, 128)]
                + [(t, "daca", r, {"strata_batch": 1}) for t in ("gpu:h100x8", "tpu:v5p-8", "tpu:v5e-8")
                   for r in (0, 128)]
                + [("tpu:v5e-8", m, r, {"rollout_weights": "sharded"}) for m in ("daca", "d1") for r in (0, 128)]
                + [("tpu:v5e-8", "daca", r, {"strata_batch": 1, "rollout_weights": "sharded"}) for r in (0, 128)])
# Flags of the --sweep command passed on to each setting's process.
FORWARDED = ("model", "prompts_per_step", "group_size", "remat")
# The paper table's arms: each base method as released and with DACA.
PAPER_ARMS = ("", "daca")


def paper_presets(bases: Sequence[str], no_arms: Mapping[str, tuple[Sequence[str], str]],
                  task: str = "gsm8k") -> tuple[str, ...]:
  """The presets of the paper table (``configs/paper.py`` names): each of ``bases`` x :data:`PAPER_ARMS`
  on ``task``, arm-major, but for the arms ``no_arms`` refuses (``configs/paper.py:NO_ARMS``)."""
  return tuple(f"{base}_{task}" + (f"_{arm}" if arm else "") for arm in PAPER_ARMS for base in bases
               if arm not in no_arms.get(base, ((), ""))[0])


def _earlier(path: pathlib.Path, key: str) -> list[Any]:
  """The ``key`` list of the results file ``path`` that a sweep resumes; [] when there is none.

  Raises:
    DataError: ``path`` is not JSON, or not an object with a ``key`` list (the file named).
  """
  if not path.exists():
    return []
  fix = "give another --json, or delete it to plan every setting again"
  data = read_json(path, fix=fix, kind=None)
  if not isinstance(data, dict) or not isinstance(data.get(key), list):
    raise DataError(f"{path}: not this sweep's results (expected an object with a {key!r} list); {fix}")
  return data[key]


def _planned(part: pathlib.Path) -> dict[str, Any]:
  """The plan record one setting's process wrote to ``part``."""
  return read_json(part, fix="the planning process wrote it incompletely; rerun the sweep")


def _sweep_key(machine: int | str, method: str, rank: int, extra: Mapping[str, Any]) -> str:
  return json.dumps([machine, method, rank, sorted(extra.items())])


def sweep(out: str, command: Sequence[str], flags: Mapping[str, Any] | None = None, *, targets: bool = True) -> None:
  """Compiles every setting of :data:`TARGET_SWEEP` (``targets``: each machine's own compiler) or of
  :data:`SWEEP` (simulated CPU devices) not yet in ``out`` and appends it there.

  Args:
    out: the results file (JSON: ``batch`` and the plan ``records``).
    command: the plan script's argv prefix (``[python, experiments/plan.py]``).
    flags: further flags of every setting (a setting's own extra flags win).
    targets: the target sweep (True) or the CPU one.
  Raises:
    DataError: an existing ``out`` that is not a ``--sweep`` results file (:func:`_earlier`).
  """
  path = pathlib.Path(out)
  part = pathlib.Path(f"{out}.part")
  records = _earlier(path, "records")
  done = {_sweep_key(r["spec"].get("target") or r["spec"]["num_devices"], r["spec"]["method"], r["spec"]["lora_rank"],
                     {k: r["spec"][k] for k in ("strata_batch", "rollout_weights")
                      if r["spec"].get(k, "auto") not in (0, "auto")}) for r in records}
  for machine, method, rank, extra in (TARGET_SWEEP if targets else SWEEP):
    if _sweep_key(machine, method, rank, extra) in done:
      continue
    where = f"--target={machine}" if targets else f"--num_devices={machine}"
    args = [*command, where, f"--method={method}", f"--lora_rank={rank}", f"--json={part}"]
    args += [f"--{k}={v}" for k, v in {**(flags or {}), **extra}.items()]
    t0 = time.perf_counter()
    done_run = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    refused = _refusal(done_run)
    if refused is None:
      records.append(_planned(part))
    else:  # the target's compiler refused it for its memory: a cell that does not fit, with the compiler's words
      n = TARGETS[machine].num_devices if targets else int(machine)
      records.append({"spec": {"target": machine if targets else None, "num_devices": n, "method": method,
                               "lora_rank": rank, **{k: extra.get(k, d) for k, d in
                                                     (("strata_batch", 0), ("rollout_weights", "auto"))},
                               "remat": "full", "strategy": "fsdp"}, "refused": refused})
    print(f"compiled {machine} {method} LoRA {rank} {extra or ''}: {time.perf_counter() - t0:.0f} s"
          + (f" ({refused})" if refused else ""), flush=True)
    batch = next((r["setting"]["update_rows"] for r in records if "setting" in r), 0)
    atomic_write_json(out, {"batch": batch, "records": records})
  part.unlink(missing_ok=True)


def _refusal(run: subprocess.CompletedProcess) -> str | None:
  """The one line of a planning process the target's compiler refused for its memory (exit 1, ``error: does
  not fit ...``); None when it planned. Any other failure raises (with the process's last lines)."""
  if run.returncode == 0:
    return None
  last = (run.stderr or "").strip().splitlines()[-1:] or [""]
  if run.returncode == 1 and last[0].startswith("error: does not fit"):
    return last[0].removeprefix("error: ")
  raise subprocess.CalledProcessError(run.returncode, run.args, stderr=(run.stderr or "")[-3000:])


def paper_sweep(out: str, command: Sequence[str], config_file: str, presets: Sequence[str]) -> None:
  """Plans every ``presets`` x :data:`~daca_jax.planning.report.PAPER_TARGETS` machine not yet in ``out``
  (``--config=<config_file>:<preset>``): each machine's target compile (``--target``) and its CPU plan
  (``--num_devices --device``), then :data:`~daca_jax.planning.report.PAPER_SCALE`'s preset on the larger
  slices, and appends each to ``out`` as it finishes.

  Raises:
    DataError: an existing ``out`` that is not a ``--paper_sweep`` results file (:func:`_earlier`).
  """
  path = pathlib.Path(out)
  part = pathlib.Path(f"{out}.part")
  entries = _earlier(path, "entries")
  done = {(e["preset"], entry_target(e)) for e in entries}
  jobs = []
  for preset in presets:
    for _, target, dev, n in PAPER_TARGETS:
      jobs += [(preset, target, TARGETS[target].device, [f"--target={target}"]),
               (preset, f"cpu:{n}", dev, [f"--num_devices={n}", f"--device={dev}"])]
  scale_preset, larger = PAPER_SCALE
  if scale_preset in presets:
    jobs += [(scale_preset, t, TARGETS[t].device, [f"--target={t}", *(f"--config.{k}={v}" for k, v in fields.items())])
             for t, fields in larger]
  for preset, target, dev, flags in jobs:
    if (preset, target) in done:
      continue
    t0 = time.perf_counter()
    subprocess.run([*command, f"--config={config_file}:{preset}", *flags, f"--json={part}"], check=True,
                   stdout=subprocess.DEVNULL)
    entries.append(paper_record(preset, dev, _planned(part), target))
    part.unlink()
    print(f"planned {preset} for {target}: {time.perf_counter() - t0:.0f} s", flush=True)
    atomic_write_json(out, {"command": "python experiments/plan.py --paper_sweep --json=" + out, "entries": entries})


__all__ = ["FORWARDED", "PAPER_ARMS", "SWEEP", "TARGET_SWEEP", "paper_presets", "paper_sweep", "sweep"]
