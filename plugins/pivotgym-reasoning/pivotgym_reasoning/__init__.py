"""pivotgym-reasoning: single-turn, procedurally generated reasoning envs for measuring forgetting.

Each env ``reasoning/<task>-v0`` wraps one `reasoning-gym <https://pypi.org/project/reasoning-gym/>`_
generator at one frozen difficulty (:mod:`pivotgym_reasoning.tasks`), asks its question in the chat format,
reads the answer out of the reply with linear parsers (:mod:`pivotgym_reasoning.parsing`) and scores it with
the generator's own ``score_answer`` (:mod:`pivotgym_reasoning.env`). The difficulties were chosen by
``python -m pivotgym_reasoning.calibrate`` (:mod:`pivotgym_reasoning.calibrate`); the suite ``ood-reasoning``
holds every env's test split.
"""

from pivotgym_reasoning.tasks import TASKS, ReasoningTask, env_id

__all__ = ["TASKS", "ReasoningTask", "env_id"]
