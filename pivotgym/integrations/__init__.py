"""Adapters for other trainers: pivot states, rewards and configs in the forms they read.

* :mod:`pivotgym.integrations.trl` - TRL's ``GRPOTrainer``: a pivot dataset, a reward function judged by the
  env's functional verifier, and ``GRPOConfig`` settings matching our PivotRL trainer;
* :mod:`pivotgym.integrations.verl` - verl: ``compute_score`` in its reward-function form and the parquet
  layout its RL datasets use, written from a pivot set;
* NeMo-Gym / NeMo-RL: pivot rows both ways are :mod:`pivotgym.pivot.formats` (``pivotgym pivots export``).

Each adapter imports its trainer's package only when used; none is needed to import this package.
docs/integrations.md says how to use each and how it differs from our trainer.
"""
