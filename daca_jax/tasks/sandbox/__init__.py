"""Running untrusted, model-written Python, and judging it without trusting it.

One module per job (the threat model is in :mod:`~daca_jax.tasks.sandbox.runner`):

* :mod:`~daca_jax.tasks.sandbox.runner`: the sandbox (namespaces, Landlock, resource limits, a
  scrubbed ``python -I -S``) and the worker pool that runs many programs, over
  :mod:`~daca_jax.tasks.sandbox.limits` (a run's limits and result), :mod:`~daca_jax.tasks.sandbox.host`
  (the isolation this machine offers) and :mod:`~daca_jax.tasks.sandbox.protocol` (the launcher's
  command line and report);
* :mod:`~daca_jax.tasks.sandbox.launcher`: the in-sandbox launcher, run by file path as the
  sandbox's first process (standard library only; never imported);
* :mod:`~daca_jax.tasks.sandbox.readview`: the files a sandboxed interpreter may read;
* :mod:`~daca_jax.tasks.sandbox.judge`: judged runs, where the tests run in a second sandbox and
  call the candidate's functions through a pipe;
* :mod:`~daca_jax.tasks.sandbox.rpc` and :mod:`~daca_jax.tasks.sandbox.values`: the two modules
  shipped (compiled) into both sandboxes of a judged run (standard library only).

The code tasks (:mod:`daca_jax.tasks.code`) build on this package; nothing here knows a task.
"""
from daca_jax.tasks.sandbox.runner import (ERROR, FAILED, PASSED, STATUSES, TIMEOUT, SandboxLimits, SandboxResult,
                                           check_max_workers, isolation_summary, landlock_abi,
                                           namespaces_available, process_limit_mode, run_program, run_programs)

__all__ = ["ERROR", "FAILED", "PASSED", "STATUSES", "TIMEOUT", "SandboxLimits", "SandboxResult", "check_max_workers",
           "isolation_summary", "landlock_abi", "namespaces_available", "process_limit_mode", "run_program",
           "run_programs"]
