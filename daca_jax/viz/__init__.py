"""Pictures of what the model does: denoising-trajectory views (PNG / HTML) of the learner's rollout."""
from daca_jax.viz.trajectory import (TrajectoryView, credit_learners, group_view, progress_of, rollout_views,
                                     token_text)
from daca_jax.viz.trajectory_html import render_html
from daca_jax.viz.trajectory_png import figure_rgb, render_png

__all__ = ["TrajectoryView", "credit_learners", "figure_rgb", "group_view", "progress_of", "render_html",
           "render_png", "rollout_views", "token_text"]
