"""Gymnasium spaces for text environments: a chat-message list (observations) and free text (actions)."""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

ROLES = ("system", "user", "assistant", "tool")
_PRINTABLE = string.printable


class TextAction(spaces.Space[str]):
    """Any Python string up to ``max_length`` characters: the raw assistant text is the action."""

    def __init__(self, max_length: int = 100_000, seed: int | np.random.Generator | None = None) -> None:
        self.max_length = max_length
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, 40))
        chars = self.np_random.choice(list(_PRINTABLE), size=length)
        return "".join(chars.tolist())

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"TextAction(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextAction) and other.max_length == self.max_length


class Messages(spaces.Space[list]):
    """A list of OpenAI-style chat message dicts (the new messages an env emits after a step)."""

    def __init__(self, max_messages: int = 10_000, seed: int | np.random.Generator | None = None) -> None:
        self.max_messages = max_messages
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        n = int(self.np_random.integers(1, 3))
        out = []
        for _ in range(n):
            role = ROLES[int(self.np_random.integers(0, len(ROLES)))]
            length = int(self.np_random.integers(0, 30))
            text = "".join(self.np_random.choice(list(_PRINTABLE), size=length).tolist())
            out.append({"role": role, "content": text})
        return out

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list) or len(x) > self.max_messages:
            return False
        return all(isinstance(m, dict) and m.get("role") in ROLES and isinstance(m.get("content", ""), str) for m in x)

    def __repr__(self) -> str:
        return "Messages()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Messages) and other.max_messages == self.max_messages
