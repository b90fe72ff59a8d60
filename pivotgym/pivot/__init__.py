"""The PivotRL method's offline half: profile every expert turn with a frozen reference policy, select the
turns with a learning signal (pivots), and move pivot sets in and out of other formats.

* :mod:`pivotgym.pivot.profile` - :class:`Profiler`, :class:`ProfileConfig`, :class:`AdaptiveK`;
* :mod:`pivotgym.pivot.select` - :class:`SelectionRule`, :func:`select_pivots`;
* :mod:`pivotgym.pivot.formats` - NeMo-Gym / Nemotron pivot rows and HF ``datasets`` prompts for TRL.
"""

from pivotgym.pivot.profile import (
    AdaptiveK,
    ProfileConfig,
    Profiler,
    ProfileResult,
    profile_config,
    profile_trajectories,
)
from pivotgym.pivot.select import SelectionRule, select_pivots, turn_stats

__all__ = [
    "AdaptiveK",
    "ProfileConfig",
    "ProfileResult",
    "Profiler",
    "SelectionRule",
    "profile_config",
    "profile_trajectories",
    "select_pivots",
    "turn_stats",
]
