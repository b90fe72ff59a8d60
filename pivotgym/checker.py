"""check_env: does an environment (and its verifier) keep the contracts the rest of pivotgym relies on?

Runs gymnasium's own checker, then text-env rules: tasks load and splits are disjoint, reset is deterministic
under a seed, malformed and non-text actions give an error observation with reward 0 instead of raising,
episodes truncate at ``max_turns``, expert trajectories replay to success (twice, identically), and the
verifier credits every expert action, deterministically, while crediting none of a few reward-hacking probes.

Where the env can name a legal but wrong action (the optional capability ``env.wrong_action(expert_text)``,
called on an env positioned at the turn; see docs/plugins.md), the verifier must also reject that action,
which catches a verifier that credits whatever the env accepts. An undecided verdict
(:attr:`pivotgym.types.Verdict.undecided`: the verifier raised or returned no ``Verdict``, or could not judge,
e.g. a search out of budget) fails the check with that reason: it is neither a credited nor a rejected action.

Last, a calibration probe (:func:`pivotgym.calibration.calibrate`, what ``pivotgym calibrate`` runs at scale):
the expert's action, its paraphrases, the wrong action and the env's own candidates at every state of the
checked trajectories are judged and played out, and a credited candidate whose episode then fails is a
failure (with the expert's continuation, only for paraphrases and the wrong action).
"""

from __future__ import annotations

import copy
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pivotgym.env import AgentEnv
from pivotgym.types import Trajectory
from pivotgym.verify import Verifier, VerifyContext, verify_safely

MALFORMED_ACTION = "\x00\x07 {{{ ((( <tool_call>{not json"
HACK_PROBES = ("", "\x00\x1b[2J\x07", "a" * 10_000)


@dataclass
class CheckResult:
    name: str
    status: str  # "pass" | "fail" | "skip"
    detail: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass
class CheckReport:
    env_id: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.status != "fail" for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "fail"]

    def to_dict(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "ok": self.ok, "results": [r.to_dict() for r in self.results]}

    def raise_for_failures(self) -> None:
        if not self.ok:
            lines = "\n".join(f"  {r.name}: {r.detail}" for r in self.failures)
            raise AssertionError(f"{self.env_id} failed {len(self.failures)} check(s):\n{lines}")


class _Fail(Exception):
    pass


class _Skip(Exception):
    pass


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise _Fail(message)


def check_env(
    env: AgentEnv | str,
    *,
    verifier: Verifier | str | None = None,
    n_experts: int = 1,
    split: str | None = None,
    seed: int = 0,
    env_kwargs: dict[str, Any] | None = None,
) -> CheckReport:
    """Check ``env`` (an instance or a registered id). ``verifier`` defaults to the env's registered
    functional verifier. Returns a report; call ``report.raise_for_failures()`` in tests."""
    import pivotgym.registry as registry

    env_kwargs = dict(env_kwargs or {})
    if isinstance(env, str):
        env_id = env
        instance: AgentEnv = registry.make(env_id, **env_kwargs)
        factory: Callable[[], AgentEnv] = lambda: registry.make(env_id, **env_kwargs)  # noqa: E731
    else:
        env_id, instance = env.env_id, env
        factory = lambda: copy.deepcopy(_pristine)  # noqa: E731
        _pristine = copy.deepcopy(env)
    judge: Verifier | None
    if isinstance(verifier, str):
        judge = registry.make_verifier(verifier)
    elif verifier is None and (default := getattr(instance, "default_verifier", None)):
        judge = registry.make_verifier(default)
    else:
        judge = verifier
    return _run_checks(instance, env_id, factory, judge, n_experts=n_experts, split=split, seed=seed)


def _run_checks(
    env: AgentEnv,
    env_id: str,
    factory: Callable[[], AgentEnv],
    verifier: Verifier | None,
    *,
    n_experts: int,
    split: str | None,
    seed: int,
) -> CheckReport:
    """Every check of :func:`check_env` on a built env (``factory`` makes fresh copies) and its verifier."""
    report = CheckReport(env_id)
    split = split or env.splits[0]
    experts: list[Trajectory] = []

    def run(name: str, fn: Callable[[], str | None]) -> None:
        try:
            detail = fn() or ""
            report.results.append(CheckResult(name, "pass", detail))
        except _Skip as exc:
            report.results.append(CheckResult(name, "skip", str(exc)))
        except _Fail as exc:
            report.results.append(CheckResult(name, "fail", str(exc)))
        except Exception as exc:
            report.results.append(CheckResult(name, "fail", f"raised {exc!r}\n{traceback.format_exc(limit=4)}"))

    def gymnasium_checker() -> str:
        from gymnasium.utils.env_checker import check_env as gym_check

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gym_check(factory(), skip_render_check=True)
        notes = sorted({str(w.message).splitlines()[0][:120] for w in caught})
        return "; ".join(notes[:3])

    def tasks() -> str:
        seen: dict[str, str] = {}
        counts = []
        for s in env.splits:
            ts = env.tasks(s)
            counts.append(f"{s}={len(ts)}")
            for t in ts:
                _expect(t.id not in seen or seen[t.id] == s, f"task {t.id!r} is in both {seen.get(t.id)!r} and {s!r}")
                _expect(t.id not in seen, f"task id {t.id!r} repeats within split {s!r}")
                seen[t.id] = s
        _expect(len(env.tasks(split)) > 0, f"split {split!r} has no tasks")
        return ", ".join(counts)

    def reset_determinism() -> None:
        a = env.reset(seed=seed, options={"split": split})
        b = env.reset(seed=seed, options={"split": split})
        _expect(a == b, "reset(seed) returned different observations or infos for the same seed")
        _expect(env.observation_space.contains(a[0]), "reset observation is not in observation_space")

    def malformed_action() -> None:
        env.reset(seed=seed, options={"split": split})
        for action in (MALFORMED_ACTION, 12345, None):
            obs, reward, _term, _trunc, info = env.step(action)  # type: ignore[arg-type]
            _expect(reward == 0, f"malformed action {action!r} got reward {reward}")
            _expect("error" in info, f"malformed action {action!r}: info has no 'error' key")
            _expect(env.observation_space.contains(obs), "error observation is not in observation_space")
            _expect(
                bool(obs) and "error" in obs[-1].get("content", "").lower(), "error observation does not say 'error'"
            )
            if env.done:
                env.reset(seed=seed, options={"split": split})

    def truncation() -> str:
        env.reset(seed=seed, options={"split": split})
        for i in range(1, env.max_turns + 2):
            _obs, _r, terminated, truncated, _info = env.step(MALFORMED_ACTION)
            if terminated:
                raise _Skip(f"a malformed action terminated the episode at turn {i}")
            if truncated:
                _expect(i == env.max_turns, f"truncated at turn {i}, max_turns is {env.max_turns}")
                return f"truncated at max_turns={env.max_turns}"
        raise _Fail(f"not truncated after {env.max_turns + 1} turns (max_turns={env.max_turns})")

    def expert_replay() -> str:
        try:
            experts.extend(env.expert_trajectories(split, limit=n_experts))
        except NotImplementedError as exc:
            raise _Skip(str(exc)) from None
        _expect(bool(experts), f"no expert trajectory for split {split!r}")
        runs = [[_replay(factory(), t) for t in experts] for _ in range(2)]
        for traj, (rewards, _obs, terminated) in zip(experts, runs[0]):
            _expect(terminated, f"{traj.task_id}: replaying the expert did not terminate the episode")
            _expect(rewards[-1] > 0, f"{traj.task_id}: expert replay ended with reward {rewards[-1]}")
            _expect(
                abs(rewards[-1] - traj.reward) < 1e-9, f"{traj.task_id}: replay reward {rewards[-1]} != {traj.reward}"
            )
        _expect(runs[0] == runs[1], "replaying the same expert actions twice gave different results")
        return f"{len(experts)} trajectory(ies), {sum(len(t.assistant_turns()) for t in experts)} turns"

    def verifier_expert() -> str:
        if verifier is None:
            raise _Skip("the env has no registered verifier")
        if not experts:
            raise _Skip("no expert trajectory to verify against")
        n = 0
        for traj in experts:
            for turn in traj.turns():
                ctx = VerifyContext(turn, env_factory=factory)
                text = ctx.expert_text
                first = verify_safely(verifier, ctx, text)
                second = verify_safely(verifier, VerifyContext(turn, env_factory=factory), text)
                _expect(
                    not first.undecided,
                    f"{traj.task_id} turn {turn.turn}: the verifier could not judge the expert action ({first.reason})",
                )
                _expect(
                    first.reward == 1.0,
                    f"{traj.task_id} turn {turn.turn}: expert action got reward {first.reward} ({first.reason})",
                )
                _expect(
                    (first.reward, first.reason) == (second.reward, second.reason),
                    f"{traj.task_id} turn {turn.turn}: verdict changed between two runs",
                )
                for probe in HACK_PROBES:
                    verdict = verify_safely(verifier, ctx, probe)
                    _expect(
                        not verdict.undecided,
                        f"{traj.task_id} turn {turn.turn}: the verifier could "
                        f"not judge the probe {probe[:20]!r} ({verdict.reason}); garbage must be judged wrong, "
                        "not left undecided",
                    )
                    _expect(
                        verdict.reward == 0.0,
                        f"{traj.task_id} turn {turn.turn}: probe {probe[:20]!r} "
                        f"got reward {verdict.reward} ({verdict.reason})",
                    )
                n += 1
        return f"{verifier.name} v{verifier.version}: {n} expert turns credited, probes rejected"

    def verifier_wrong_action() -> str:
        if verifier is None or not experts:
            raise _Skip("no verifier or no expert trajectory")
        if not callable(getattr(env, "wrong_action", None)):
            raise _Skip(f"{type(env).__name__} names no wrong action (optional: env.wrong_action(expert_text))")
        n = 0
        for traj in experts:
            for turn in traj.turns():
                ctx = VerifyContext(turn, env_factory=factory)
                wrong = ctx.env().wrong_action(ctx.expert_text)  # type: ignore[attr-defined]
                if wrong is None:
                    continue
                _expect(isinstance(wrong, str), f"wrong_action returned {type(wrong).__name__}, not str")
                *_, info = ctx.env().step(wrong)
                _expect(
                    "error" not in info,
                    f"{traj.task_id} turn {turn.turn}: env.wrong_action named "
                    f"{wrong!r}, which the env itself rejects ({info.get('error')}): it must be legal",
                )
                verdict = verify_safely(verifier, ctx, wrong)
                _expect(
                    not verdict.undecided,
                    f"{traj.task_id} turn {turn.turn}: the verifier could not "
                    f"judge {wrong!r} ({verdict.reason}); an undecided verdict is not a rejection",
                )
                _expect(
                    verdict.reward == 0.0,
                    f"{traj.task_id} turn {turn.turn}: the legal but wrong action "
                    f"{wrong!r} got reward {verdict.reward} ({verdict.reason}); the verifier credits actions "
                    f"that are not equivalent to the expert's",
                )
                n += 1
        if not n:
            raise _Skip("the env named no wrong action at any expert turn")
        return f"{n} legal but wrong action(s) rejected"

    def calibration_probe() -> str:
        if verifier is None or not experts:
            raise _Skip("no verifier or no expert trajectory")
        from pivotgym.calibration import calibrate, provides_continuation

        continuation = "optimal" if provides_continuation(env) else "expert"
        result = calibrate(env_id, experts, {"functional": verifier}, continuation=continuation, env_factory=factory)
        # under the expert's own continuation an action equivalent by another route (an env candidate) can
        # break the expert's remaining plan: only the expert's paraphrases and wrong action are held to it
        held = [r for r in result.disagreements("functional") if r.verdicts["functional"]["credited"]]
        if continuation == "expert":
            held = [r for r in held if r.candidate.source != "env"]
        matrix = result.confusion("functional")
        summary = (
            f"{matrix.n} candidates played out ({continuation} continuation): TP {matrix.tp}, FP {matrix.fp}, "
            f"FN {matrix.fn}, TN {matrix.tn}, undetermined {matrix.undetermined}"
        )
        if held:
            first = held[0]
            raise _Fail(
                f"{summary}; the verifier credits {first.candidate.text[:60]!r} ({first.candidate.source}) at "
                f"{first.task_id} turn {first.turn}, but played out it fails: {first.outcome.detail}"
            )
        return summary

    run("gymnasium_checker", gymnasium_checker)
    run("tasks", tasks)
    run("reset_determinism", reset_determinism)
    run("malformed_action", malformed_action)
    run("truncation", truncation)
    run("expert_replay", expert_replay)
    run("verifier", verifier_expert)
    run("verifier_wrong_action", verifier_wrong_action)
    run("calibration", calibration_probe)
    return report


def _replay(env: AgentEnv, traj: Trajectory) -> tuple[list[float], list[Any], bool]:
    env.reset(options={"task_id": traj.task_id})
    rewards: list[float] = []
    observations: list[Any] = []
    terminated = False
    for i in traj.assistant_turns():
        obs, reward, terminated, truncated, _info = env.step(env.render_action(traj.messages[i]))
        rewards.append(reward)
        observations.append(obs)
        if terminated or truncated:
            break
    return rewards, observations, terminated
