"""pivotgym-planning: PDDL planning environments (pddlgym problems, pyperplan search, VAL validation) with
an optimal-action functional verifier. Registered through the ``pivotgym`` entry points only."""

__version__ = "0.1.0"
