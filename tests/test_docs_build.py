"""The documentation site (docs/, Sphinx + MyST + autodoc) builds with warnings as errors, and its API
reference documents the library's main entry points.

A docstring that docutils cannot parse (a section without its indented entries, an unclosed inline
literal, an unexpected indentation) or an object documented twice is a warning, so ``-W`` fails here.
"""
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")
pytest.importorskip("sphinx_book_theme")

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (API page, fully qualified name of an object it must document): one per core package's main entry point.
DOCUMENTED = [
    ("diffusion", "daca_jax.diffusion.rollout.make_rollout_fn"),
    ("credit", "daca_jax.credit.dps.dps_credit"),
    ("likelihood", "daca_jax.likelihood.stratified.stratified_logprobs"),
    ("rl", "daca_jax.rl.methods.diffu_grpo.diffu_grpo_loss"),
    ("rl", "daca_jax.rl.learner.GRPOLearner"),
    ("models", "daca_jax.models.hf_import.load_hf_checkpoint"),
]


def test_docs_build_without_warnings(tmp_path):
  out = tmp_path / "html"
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"),
                         str(ROOT / "docs"), str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, f"sphinx failed (warnings are errors):\n{proc.stderr[-6000:]}"
  for page, name in DOCUMENTED:
    html = (out / "api" / f"{page}.html").read_text(encoding="utf-8")
    # autodoc's anchor of the object's own description (a mere mention or link has no such id)
    assert f'id="{name}"' in html, f"api/{page}.html does not document {name}"
    # its docstring was parsed (napoleon's Args section became a parameter list), not only its signature
    start = html.index(f'id="{name}"')
    end = html.find('id="daca_jax.', start + 1)
    assert ">Parameters<" in html[start:end if end > 0 else None], f"{name}: no parameter list rendered"
