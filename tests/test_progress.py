"""Progress bars (daca_jax.progress): tqdm passthrough, and the phase bar that announces its first step."""
from daca_jax import progress as progress_lib


def test_progress_counts_and_passthrough():
  bar = progress_lib.progress(range(5), desc="x", disable=True)
  assert list(bar) == [0, 1, 2, 3, 4]
  manual = progress_lib.progress(total=3, desc="manual", disable=False)
  manual.update(2)
  assert manual.n == 2 and manual.total == 3 and manual.desc.startswith("manual")
  manual.close()


def test_phase_progress_announces_the_first_step_and_times_it():
  events = []
  pp = progress_lib.PhaseProgress(range(3), desc="SFT", log=events.append, first="compiling the SFT step",
                                  disable=False)
  for i in pp:
    events.append(f"body {i}")
    pp.set_postfix(loss="1.0")
  assert events[0] == "SFT: compiling the SFT step…" and events[1] == "body 0"
  assert events[2].startswith("SFT: first step done in ") and events[3:] == ["body 1", "body 2"]
  assert pp.first_step_s is not None and pp._bar.n == 3 and pp._bar.initial == 1
