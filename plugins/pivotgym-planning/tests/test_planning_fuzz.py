"""2,000+ random and garbage strings through step() and verify(): never an exception."""

import random
import string

import pivotgym
from pivotgym import VerifyContext
from pivotgym.verify import verify_safely
from pivotgym_planning.verifier import OptimalActionVerifier


def _garbage(rng: random.Random, names: list[str], objects: list[str]) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(0, 60)))
    if kind == 1:
        return "".join(chr(rng.randrange(0, 0x2FFF)) for _ in range(rng.randrange(0, 30)))
    if kind == 2:  # well-formed-looking actions with random names and arguments
        args = " ".join(rng.choice(objects + ["x", "?x", "42"]) for _ in range(rng.randrange(0, 5)))
        return f"({rng.choice(names + ['fly', 'PICK-UP', ''])} {args})"
    if kind == 3:
        return rng.choice(["(", ")", "((", "()", "(())", ",", "```", "\x00", "\n\n"]) * rng.randrange(1, 400)
    if kind == 4:  # call style with odd separators
        return f"{rng.choice(names)}({', '.join(rng.choice(objects) for _ in range(rng.randrange(0, 4)))}"
    return rng.choice(names) + " " + " ".join(rng.choice(objects) for _ in range(rng.randrange(0, 4)))


def test_fuzz_step_and_verify(registry):
    rng = random.Random(1234)
    env = pivotgym.make("planning/blocks-v0")
    traj = next(iter(env.expert_trajectories("train", limit=1)))
    turn = traj.turn(1)
    ctx = VerifyContext(turn)
    problem = ctx.env().problem
    names, objects = sorted(problem.schemas), sorted(problem.objects)
    verifier = OptimalActionVerifier()
    env.reset(options={"task_id": traj.task_id})
    credited = 0
    for _ in range(2200):
        text = _garbage(rng, names, objects)
        obs, reward, terminated, truncated, info = env.step(text)
        assert isinstance(obs, list) and obs and isinstance(obs[0]["content"], str)
        assert reward in (0.0, 1.0)
        if terminated or truncated:
            env.reset(options={"task_id": traj.task_id})
        verdict = verify_safely(verifier, ctx, text)
        assert not verdict.reason.startswith("verifier_error"), (text, verdict.reason)
        credited += verdict.reward == 1.0
    # non-text actions too
    for bad in (None, 3, b"(pick-up a robot)", ["x"]):
        obs, reward, *_, info = env.step(bad)
        assert reward == 0 and "error" in info
    assert credited < 2200
