"""pivotgym-tooluse: function calling on BFCL data.

Single-turn envs (``tooluse/bfcl-simple-v0`` ...) judge one reply against BFCL's acceptable answers; the
multi-turn env (``tooluse/bfcl-multi-turn-v0``) executes calls against BFCL's stdlib-only simulators. The
functional verifier (``tooluse/functional``) layers parse, call-vs-message decision, names, structural
arguments and execution from the exact state; ``tooluse/exact`` is its strict ablation.
"""

from pivotgym_tooluse.parsing import ParsedAction, ParseError, parse_action, render_calls

__all__ = ["ParseError", "ParsedAction", "parse_action", "render_calls"]
