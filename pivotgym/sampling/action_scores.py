"""The log-probability that a causal LM emits given actions at given prompts, and its greedy answer there.

This is the model side of the likelihood floors (:mod:`pivotgym.eval.likelihood`): an action's probability is
that of its tokens (:func:`action_tokens`: as the chat template writes an assistant message with that text)
followed by any stop token of the sampler, or of exactly ``cap`` tokens where the sampler stops on length.
:func:`action_logprobs` scores one state's actions on one forward of its prompt; :func:`forest_scores` scores
every state of a trajectory on one forward, its actions hanging off the longest history as a tree, and can
decode each state's greedy answer on that pass's key/value cache. No gradients; the model is put in eval mode
for the duration and restored after.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pivotgym.errors import SamplerError

__all__ = [
    "ChainScore",
    "action_logprobs",
    "action_tokens",
    "chain_logprobs",
    "chain_scores",
    "forest_scores",
    "model_parts",
]


def model_parts(sampler: Any) -> tuple[Any, Any, list[int]]:
    """The transformers model, tokenizer and stop tokens behind an hf-backend sampler."""
    model, tokenizer = getattr(sampler, "model", None), getattr(sampler, "tokenizer", None)
    stops = sorted(int(t) for t in getattr(sampler, "eos_ids", ()) or ())
    if model is None or tokenizer is None or not hasattr(model, "parameters") or not stops:
        raise SamplerError(
            f"likelihood scores need a transformers model; {type(sampler).__name__} has none",
            hint="use the hf sampler backend (--sampler hf) for likelihood scores",
        )
    return model, tokenizer, stops


def action_tokens(
    tokenizer: Any, messages: Sequence[dict[str, Any]], prompt_ids: Sequence[int], action: str, stops: Sequence[int]
) -> tuple[list[int], str]:
    """The tokens a model emits for ``action`` after ``prompt_ids`` (the rendered ``messages``), before its
    end-of-turn token, and how they were found (``"template"`` or ``"plain"``; see the module docstring)."""
    try:
        full = tokenizer.apply_chat_template(
            [*messages, {"role": "assistant", "content": action}],
            add_generation_prompt=False,
            tokenize=True,
            return_dict=False,
        )
        full = [int(x) for x in full]
    except Exception:
        full = []
    n = len(prompt_ids)
    if full[:n] == list(prompt_ids):
        tail = full[n:]
        end = next((j for j, t in enumerate(tail) if t in stops), None)
        if end is not None and end > 0:
            return tail[:end], "template"
    return [int(x) for x in tokenizer(action, add_special_tokens=False)["input_ids"]], "plain"


def _rows(actions: Sequence[Sequence[int]], stops: Sequence[int], cap: int | None) -> tuple[list[list[int]], list[int]]:
    """The completions to score for ``actions``: each action followed by each stop token (or alone at exactly
    the cap; none beyond it), and the action each row belongs to."""
    rows: list[list[int]] = []
    owner: list[int] = []
    for i, tokens in enumerate(actions):
        if cap is not None and len(tokens) > cap:
            continue
        if cap is not None and len(tokens) == cap:  # the sampler stops on the length, not a stop token
            rows.append(list(tokens))
            owner.append(i)
            continue
        for stop in stops:
            rows.append([*tokens, stop])
            owner.append(i)
    return rows, owner


def _per_action(n: int, owner: Sequence[int], totals: Sequence[float]) -> list[float]:
    """Each action's log-probability: the log-sum over its rows (its stop tokens); ``-inf`` without rows."""
    grouped: dict[int, list[float]] = {}
    for i, total in zip(owner, totals):
        grouped.setdefault(i, []).append(float(total))
    out = [-math.inf] * n
    for i, values in grouped.items():
        top = max(values)
        out[i] = top + math.log(sum(math.exp(v - top) for v in values))
    return out


def action_logprobs(
    model: Any, prompt_ids: Sequence[int], actions: Sequence[Sequence[int]], stops: Sequence[int], cap: int | None
) -> list[float]:
    """``log p(action tokens, then any stop token | prompt)`` for each action, one forward of the prompt
    (:func:`pivotgym.sampling.logprobs.completion_logprobs`, shared prefix) with every action x stop token batched
    on top; ``cap`` (new tokens per turn) as in the module docstring. Runs without gradients in eval mode."""
    import torch

    from pivotgym.sampling.logprobs import completion_logprobs

    rows, owner = _rows(actions, stops, cap)
    if not rows:
        return [-math.inf] * len(actions)
    with _scoring(model), torch.no_grad():
        logprobs, mask = completion_logprobs(model, list(prompt_ids), rows, shared_prefix=True)
    return _per_action(len(actions), owner, (logprobs * mask).sum(dim=1).double().cpu().tolist())


def chain_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    actions: Sequence[Sequence[Sequence[int]]],
    stops: Sequence[int],
    cap: int | None,
) -> list[list[float]]:
    """The ``logp`` of :func:`chain_scores`: per state, each action's log-probability."""
    return [state.logp for state in chain_scores(model, prompts, actions, stops, cap)]


@dataclass
class ChainScore:
    """One state's scores from :func:`chain_scores`: ``logp[i]`` of action i (``-inf`` if it cannot be
    emitted), and greedy decoding's answer from this state: its tokens (through the stop token when it stopped
    on one) and ``finish`` (``"stop"`` or ``"length"``); empty when not decoded (no cap, or a model scored one
    state at a time)."""

    logp: list[float]
    greedy: list[int] = field(default_factory=list)
    finish: str = ""


def chain_scores(
    model: Any,
    prompts: Sequence[Sequence[int]],
    actions: Sequence[Sequence[Sequence[int]]],
    stops: Sequence[int],
    cap: int | None,
    *,
    decode: bool = False,
) -> list[ChainScore]:
    """:func:`forest_scores` of one trajectory's states."""
    return forest_scores(model, [(prompts, actions)], stops, cap, decode=decode)[0]


def forest_scores(
    model: Any,
    chains: Sequence[tuple[Sequence[Sequence[int]], Sequence[Sequence[Sequence[int]]]]],
    stops: Sequence[int],
    cap: int | None,
    *,
    decode: bool = False,
    batch: int = 8,
    progress: Callable[[int], None] | None = None,
) -> list[list[ChainScore]]:
    """:func:`action_logprobs` for the states of each trajectory in ``chains`` (``(prompts, actions)`` per
    trajectory), a single forward pass per trajectory, and with ``decode`` each state's greedy answer (``cap``
    new tokens at most) decoded on top of those passes, ``batch`` trajectories at a time.

    A trajectory's prompts usually form a chain (each a prefix of the next, the history only growing), so its
    sequence is the longest prompt followed by every state's legal actions, each action attending only to its
    own state's prompt and its own earlier tokens (a 4D mask, positions continuing from that prompt): a tree of
    continuations on one trunk (prompts that do not chain get one tree each). An action's stop tokens are read
    off the logits after its last token, so each action is fed once whatever the number of stop tokens. The
    numbers equal one forward per state (a test checks them).

    Greedy decoding then reuses the passes: an answer first follows the argmax of the pass's own logits down the
    legal actions that agree with it (an answer that is a legal action costs no step at all), and only answers
    that leave them go on, on the passes' key/value caches: each step feeds every unfinished state's last token
    at once (the caches of ``batch`` trajectories stacked, so a step reads the weights once for all of them),
    each attending to its own prompt on its trunk and its own earlier answer tokens, and takes the argmax,
    until a stop token or the cap. That is the greedy answer the transformers sampler gives (argmax,
    same stop tokens, same cap) without prefilling the histories again; the two can differ only where two
    tokens' logits tie within float rounding. A model that is not full attention everywhere (sliding-window or
    recurrent layers) is scored one state at a time by :func:`action_logprobs` and not decoded. ``progress``
    is called with the number of states each batch finished."""
    if not _full_attention(model):
        out = []
        for prompts, actions in chains:
            out.append([ChainScore(action_logprobs(model, p, a, stops, cap)) for p, a in zip(prompts, actions)])
            if progress is not None:
                progress(len(prompts))
        return out
    trees: list[tuple[list[int], list[tuple[int, int]]]] = []  # (trunk, the (chain, state) it holds)
    for c, (prompts, _) in enumerate(chains):
        longest: list[int] = max((list(p) for p in prompts), key=len, default=[])
        if all(longest[: len(p)] == list(p) for p in prompts):
            trees.append((longest, [(c, i) for i in range(len(prompts))]))
        else:
            trees += [(list(p), [(c, i)]) for i, p in enumerate(prompts)]
    trees.sort(key=lambda tree: len(tree[0]))  # trunks of similar length decode together: less padding
    results: list[list[ChainScore | None]] = [[None] * len(prompts) for prompts, _ in chains]
    decode = decode and cap is not None
    for start in range(0, len(trees), max(1, batch)):
        group = trees[start : start + max(1, batch)]
        passes: list[tuple[list[tuple[int, int]], _Pass]] = []
        for trunk, members in group:
            prompts = [chains[c][0][i] for c, i in members]
            acts = [chains[c][1][i] for c, i in members]
            scored, tree_pass = _tree_scores(model, trunk, prompts, acts, stops, cap, decode)
            for (c, i), score in zip(members, scored):
                results[c][i] = score
            if tree_pass is not None:
                passes.append((members, tree_pass))
        if passes and cap is not None:
            answers = _decode_greedy(model, [p for _, p in passes], cap, stops)
            for (members, _), tree_answers in zip(passes, answers):
                for (c, i), (tokens, finish) in zip(members, tree_answers):
                    decoded = results[c][i]
                    assert decoded is not None
                    decoded.greedy, decoded.finish = tokens, finish
        if progress is not None:
            progress(sum(len(members) for _, members in group))
    return [[score for score in chain if score is not None] for chain in results]


@dataclass
class _Pass:
    """What greedy decoding needs from one tree's forward: its key/value ``cache`` (``length`` entries, the
    trunk first), where each state's prompt ends on the trunk, and each state's answer so far (``answers``:
    the tokens :func:`_walk` read off the pass's own logits) with the cache entries holding those tokens
    (``fed``, where the answer ran along a legal action)."""

    cache: Any
    length: int
    ends: list[int]
    answers: list[list[int]]
    fed: list[list[int]]


def _tree_scores(
    model: Any,
    trunk: list[int],
    prompts: Sequence[Sequence[int]],
    actions: Sequence[Sequence[Sequence[int]]],
    stops: Sequence[int],
    cap: int | None,
    keep_cache: bool,
) -> tuple[list[ChainScore], _Pass | None]:
    """The scores of states whose prompts are all prefixes of ``trunk`` (one forward), and with
    ``keep_cache`` what decoding their greedy answers needs."""
    import torch

    weight = next(model.parameters())
    device = weight.device
    tree = _Tree(trunk)
    reads = [[tree.add(len(p), list(tokens), cap) for tokens in acts] for p, acts in zip(prompts, actions)]
    ids, positions, mask = tree.tensors(device, weight.dtype)
    ends = [len(p) - 1 for p in prompts]  # where each state's first answer token is predicted
    keep = sorted({*ends, *(i for state in reads for read in state if read for i in read.positions())})
    row = {index: j for j, index in enumerate(keep)}
    with _scoring(model), torch.no_grad():
        out = model(
            input_ids=ids,
            position_ids=positions,
            attention_mask=mask,
            use_cache=keep_cache,
            logits_to_keep=torch.as_tensor(keep, dtype=torch.long, device=device),
        )
        logits = out.logits[0]
        logprobs = torch.log_softmax(logits.double(), dim=-1).cpu()
    stop_ids = torch.as_tensor(list(stops), dtype=torch.long)
    scores: list[ChainScore] = []
    for state in reads:
        values = []
        for read in state:
            if read is None:
                values.append(-math.inf)
                continue
            total = sum(float(logprobs[row[i], t]) for i, t in zip(read.at, read.tokens))
            if read.stop_at is not None:  # the sampler stops on any stop token: their probabilities add up
                total += float(torch.logsumexp(logprobs[row[read.stop_at], stop_ids], dim=0))
            values.append(total)
        scores.append(ChainScore(values))
    if not keep_cache or cap is None:
        return scores, None
    best = logits.argmax(dim=-1).tolist()  # the greedy token after every kept position
    walks = [
        _walk(end, acts, state, lambda i: best[row[i]], set(stops), cap)
        for end, acts, state in zip(ends, actions, reads)
    ]
    return scores, _Pass(out.past_key_values, ids.shape[1], ends, [w[0] for w in walks], [w[1] for w in walks])


def _walk(
    end: int,
    actions: Sequence[Sequence[int]],
    reads: Sequence[_Read | None],
    best: Callable[[int], int],
    stops: set[int],
    cap: int,
) -> tuple[list[int], list[int]]:
    """The start of a state's greedy answer read off its tree for free: follow the argmax (``best(index)``: the
    greedy token after sequence index ``index``) from the prompt's last token (``end``) down the legal actions
    whose tokens agree with it, as far as they go. Returns the tokens (ending in a stop token, or at the cap,
    when the answer is complete: a legal action, or a stop right after one) and the cache entries of the tokens
    that lie on a branch (every token but the last, which is not fed yet when the answer goes on)."""
    alive = [i for i, read in enumerate(reads) if read is not None]  # an action over the cap is never emitted
    tokens: list[int] = []
    fed: list[int] = []
    index = end
    while len(tokens) < cap:
        token = best(index)
        tokens.append(token)
        alive = [i for i in alive if len(actions[i]) > len(tokens) - 1 and actions[i][len(tokens) - 1] == token]
        if token in stops or not alive or len(tokens) == cap:
            break  # complete, or off the legal actions: decoding goes on from the last token
        read = reads[alive[0]]  # every action left holds these tokens: its entry for the last one
        assert read is not None
        j = len(tokens)
        index = read.at[j] if j < len(read.at) else int(read.stop_at)  # type: ignore[arg-type]
        fed.append(index)
    return tokens, fed


def _decode_greedy(
    model: Any, passes: Sequence[_Pass], cap: int, stops: Sequence[int]
) -> list[list[tuple[list[int], str]]]:
    """Greedy answers of every state of ``passes``, decoded together on their stacked caches (padded to the
    longest; padding is never attended to). Per pass, per state: the tokens (through a stop token) and
    ``"stop"`` or ``"length"``."""
    import torch
    from transformers import DynamicCache

    stop_set = set(stops)
    weight = next(model.parameters())
    device, dtype = weight.device, weight.dtype
    length = max(p.length for p in passes)
    cache = DynamicCache()
    for layer in range(len(passes[0].cache.layers)):
        keys, values = [], []
        for p in passes:
            k, v = p.cache.layers[layer].keys, p.cache.layers[layer].values
            pad = (0, 0, 0, length - p.length)  # along the sequence axis of (batch, heads, sequence, dim)
            keys.append(torch.nn.functional.pad(k, pad))
            values.append(torch.nn.functional.pad(v, pad))
        cache.update(torch.cat(keys), torch.cat(values), layer)
    answers = [[list(a) for a in p.answers] for p in passes]
    fed = [[list(f) for f in p.fed] for p in passes]  # cache entries of each answer's fed tokens
    with _scoring(model), torch.no_grad():
        while True:
            live = [[i for i, a in enumerate(tree) if a and a[-1] not in stop_set and len(a) < cap] for tree in answers]
            width = max(len(rows) for rows in live)
            if width == 0:
                break
            ids = torch.zeros((len(passes), width), dtype=torch.long)
            positions = torch.zeros((len(passes), width), dtype=torch.long)
            allowed = torch.zeros((len(passes), width, length + width), dtype=torch.bool)
            allowed[:, range(width), [length + r for r in range(width)]] = True  # padding sees itself only
            for b, rows in enumerate(live):
                for r, i in enumerate(rows):
                    ids[b, r] = answers[b][i][-1]
                    positions[b, r] = passes[b].ends[i] + len(answers[b][i])
                    allowed[b, r, : passes[b].ends[i] + 1] = True  # its own prompt on the trunk
                    allowed[b, r, fed[b][i]] = True
                    fed[b][i].append(length + r)
            mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
            step = model(
                input_ids=ids.to(device),
                position_ids=positions.to(device),
                attention_mask=mask[:, None].to(device),
                past_key_values=cache,
                use_cache=True,
            )
            best = step.logits.argmax(dim=-1).tolist()
            for b, rows in enumerate(live):
                for r, i in enumerate(rows):
                    answers[b][i].append(int(best[b][r]))
            length += width
    return [[(a, "stop" if a and a[-1] in stop_set else "length") for a in tree] for tree in answers]


@dataclass
class _Read:
    """Where one action is predicted in a :class:`_Tree`: ``at[j]`` is the sequence index whose logits predict
    token j, ``stop_at`` the index whose logits predict a stop token (``None`` at exactly the cap)."""

    at: list[int]
    tokens: list[int]
    stop_at: int | None

    def positions(self) -> list[int]:
        return [*self.at, *([] if self.stop_at is None else [self.stop_at])]


class _Tree:
    """One sequence holding a trunk (the longest prompt) and branches (actions), each branch hanging off the
    trunk at its state's prompt length; :meth:`tensors` gives its ids, positions and additive 4D mask."""

    def __init__(self, trunk: list[int]) -> None:
        self.trunk = len(trunk)
        self.ids = list(trunk)
        self.positions = list(range(len(trunk)))
        self.branches: list[tuple[int, int, int]] = []  # (start in the sequence, length, trunk prefix it sees)

    def add(self, prefix: int, tokens: list[int], cap: int | None) -> _Read | None:
        """Hang ``tokens`` after ``prefix`` trunk tokens. Returns where they are predicted (:class:`_Read`; no
        stop read at exactly the cap, where the sampler stops on length), or ``None`` when the action cannot
        be emitted (over the cap)."""
        n = len(tokens)
        if cap is not None and (n > cap or n == 0 == cap):
            return None
        stop = cap is None or n < cap
        fed = tokens if stop else tokens[:-1]  # the last token's own logits only matter to read a stop token
        start = len(self.ids)
        self.ids += fed
        self.positions += range(prefix, prefix + len(fed))
        self.branches.append((start, len(fed), prefix))
        # token 0 is predicted at the state's last prompt position, token j at branch token j - 1
        at = [prefix - 1] + [start + j for j in range(n - 1)] if n else []
        last = start + n - 1 if n else prefix - 1  # after the whole action: where a stop token is read
        return _Read(at, list(tokens), last if stop else None)

    def tensors(self, device: Any, dtype: Any) -> tuple[Any, Any, Any]:
        import torch

        n, trunk = len(self.ids), self.trunk
        allowed = torch.zeros((n, n), dtype=torch.bool)
        allowed[:trunk, :trunk] = torch.ones((trunk, trunk), dtype=torch.bool).tril()
        for start, length, prefix in self.branches:
            allowed[start : start + length, :prefix] = True
            allowed[start : start + length, start : start + length] = torch.ones(
                (length, length), dtype=torch.bool
            ).tril()
        mask = torch.zeros((n, n), dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        return (
            torch.as_tensor([self.ids], dtype=torch.long, device=device),
            torch.as_tensor([self.positions], dtype=torch.long, device=device),
            mask[None, None].to(device),
        )


def _full_attention(model: Any) -> bool:
    """Whether every layer attends to the whole history (no sliding window, no recurrent layers), so that
    one masked forward over a tree of continuations equals one forward per continuation."""
    config = getattr(model, "config", None)
    types = set(getattr(config, "layer_types", None) or [])
    if types:
        return types <= {"full_attention"}
    return not (getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True))


class _scoring:
    """Eval mode for the duration (dropout off), the model's own mode restored after."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.was_training = bool(getattr(model, "training", False))

    def __enter__(self) -> None:
        self.model.eval()

    def __exit__(self, *exc: object) -> None:
        self.model.train(self.was_training)
