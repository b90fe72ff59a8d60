"""A key/value cache that appends in place: transformers' ``DynamicCache`` whose layers keep spare room.

transformers' ``DynamicLayer`` appends each forward's keys and values with ``torch.cat``, so every decode step
copies every layer's whole cache: work quadratic in the sequence, and on a CPU decoding a batch of long
histories (E2E RL's episodes, K samples of a long state) a tenth of the time or more. :class:`GrowingLayer`
writes into a buffer with room for :attr:`GrowingLayer.headroom` more tokens and exposes the filled part as a
view, reallocating only when the room runs out. The keys and values are the same numbers in the same layout,
so attention, and the samples, are bit for bit those of ``DynamicLayer``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends into preallocated room (``headroom`` tokens at a time) instead of
    concatenating. ``keys``/``values`` stay ``[batch, heads, length, dim]`` (views of the buffers); anything
    that replaces them (cropping, offloading) is picked up at the next update, which copies into fresh room."""

    #: tokens of spare room reserved whenever the buffers are (re)allocated
    headroom = 128

    def __init__(self) -> None:
        super().__init__()
        self._room: tuple[torch.Tensor, torch.Tensor] | None = None  # the buffers, [batch, heads, capacity, dim]
        self._views: tuple[torch.Tensor, torch.Tensor] | None = None  # the keys and values last exposed

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length, new = self.get_seq_length(), key_states.shape[-2]
        room = self._owned_room()
        if room is None or room[0].shape[-2] < length + new:
            room = self._reserve(length, length + new + self.headroom, key_states, value_states)
        room_keys, room_values = room
        room_keys[..., length : length + new, :].copy_(key_states)
        room_values[..., length : length + new, :].copy_(value_states)
        return self._show(length + new)

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat the rows (room included), so the next update still appends in place."""
        room, length = self._owned_room(), self.get_seq_length()
        if room is not None and length > 0:
            self._room = (room[0].repeat_interleave(repeats, 0), room[1].repeat_interleave(repeats, 0))
            self._show(length)
        else:
            super().batch_repeat_interleave(repeats)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the given rows (room included), so the next update still appends in place."""
        room, length = self._owned_room(), self.get_seq_length()
        if room is not None and length > 0:
            self._room = (room[0][indices], room[1][indices])
            self._show(length)
        else:
            super().batch_select_indices(indices)

    # ------------------------------------------------------------------ internals
    def _owned_room(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The buffers, while ``keys``/``values`` are still the views this layer last exposed of them; None once
        something replaced them from outside (or before the first update)."""
        owned = self._views is not None and self._views[0] is self.keys and self._views[1] is self.values
        return self._room if owned else None

    def _reserve(
        self, length: int, capacity: int, key_states: torch.Tensor, value_states: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh buffers of ``capacity`` tokens holding the current ``length`` tokens."""
        batch, heads, _, dim = key_states.shape
        room_keys = key_states.new_empty((batch, heads, capacity, dim))
        room_values = value_states.new_empty((batch, value_states.shape[1], capacity, value_states.shape[-1]))
        if length:
            assert self.keys is not None and self.values is not None
            room_keys[..., :length, :].copy_(self.keys)
            room_values[..., :length, :].copy_(self.values)
        self._room = (room_keys, room_values)
        return self._room

    def _show(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Expose the first ``length`` tokens of the buffers as ``keys``/``values``."""
        assert self._room is not None
        views = (self._room[0][..., :length, :], self._room[1][..., :length, :])
        self.keys, self.values = views
        self._views = views
        return views


def growing_cache(config: Any = None, data: Iterable[tuple[torch.Tensor, torch.Tensor]] | None = None) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose full-attention layers are :class:`GrowingLayer`, filled with
    ``data`` (one ``(keys, values)`` per layer) when given. A model with other layer kinds (sliding window,
    linear attention) keeps transformers' layers: its cache is exactly ``DynamicCache(data, config)``."""
    cache = DynamicCache(config=config)
    if not all(type(layer) is DynamicLayer for layer in cache.layers):
        return DynamicCache(ddp_cache_data=data, config=config) if data is not None else cache
    if not cache.layers:  # no config: layers are created as the model asks for them
        cache.layer_class_to_replicate = GrowingLayer
    layers = [GrowingLayer() for _ in cache.layers]
    for index, (keys, values) in enumerate(data or ()):
        if index == len(layers):
            layers.append(GrowingLayer())
        layers[index].update(keys, values)
    cache.layers[:] = layers
    return cache
