"""pivotgym-swe: repository repair environments (``swe/*-v0``) run in pivotgym's sandbox.

Tasks follow the SWE-bench instance schema; the default sets are synthesised SWE-smith style from real
projects (toolz, more-itertools) and from HumanEval (HumanEvalFix style). See ``pivotgym swe synth``.
"""

__version__ = "0.1.0"
