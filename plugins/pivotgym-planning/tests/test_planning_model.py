"""The lifted model: lenient parsing, precise errors, PDDL step semantics."""

import pytest

from pivotgym_planning.model import ActionError, load_problem


@pytest.fixture(scope="module")
def blocks():
    return load_problem("blocks", "problem1.pddl")


@pytest.mark.parametrize(
    "text",
    [
        "(pick-up a robot)",
        "pick-up(a, robot)",
        "PICK_UP(A, robot)",
        "Action: (pick-up a robot)",
        "```\n(pick-up a robot)\n```",
        "pick-up a robot",
        "pickup a",
        "(pick-up a)",
        "pick up a",
    ],
)
def test_lenient_parsing(blocks, text):
    assert blocks.parse(text, blocks.init).text == "(pick-up a robot)"


def test_missing_argument_is_completed_only_when_unambiguous(blocks):
    state = blocks.apply(blocks.init, blocks.parse("(pick-up a robot)"))
    assert blocks.parse("(stack a b)", state).text == "(stack a b robot)"
    with pytest.raises(ActionError) as err:
        blocks.parse("(stack a)", state)  # three blocks could complete it
    assert err.value.code == "bad_arguments" and "takes 3 argument" in str(err.value)


def test_precondition_error_names_the_failed_facts(blocks):
    action = blocks.parse("(unstack a b robot)")
    with pytest.raises(ActionError) as err:
        blocks.apply(blocks.init, action)
    assert err.value.code == "precondition"
    assert "(on a b) is false" in str(err.value)
    assert err.value.details["missing"] == ["(on a b)"]


@pytest.mark.parametrize(
    "text,code",
    [
        ("", "unparseable"),
        ("((((", "unparseable"),
        ("(fly a b)", "unknown_action"),
        ("(pick-up zz robot)", "bad_arguments"),
        ("(pick-up robot robot)", "bad_arguments"),
        ("(pick-up a b c d)", "bad_arguments"),
    ],
)
def test_bad_actions_raise_with_a_code(blocks, text, code):
    with pytest.raises(ActionError) as err:
        blocks.apply(blocks.init, blocks.parse(text, blocks.init))
    assert err.value.code == code and str(err.value)


def test_apply_follows_add_after_delete(blocks):
    state = blocks.apply(blocks.init, blocks.parse("(pick-up a robot)"))
    assert "(holding a)" in state and "(ontable a)" not in state and "(handempty robot)" not in state
    assert blocks.unsatisfied(state, blocks.parse("(put-down a robot)")) == []
    texts = [a.text for a in blocks.applicable(state)]
    assert texts == sorted(texts) and "(stack a b robot)" in texts and "(pick-up b robot)" not in texts


def test_statics_are_separated_from_the_state():
    gripper = load_problem("gripper", "prob01.pddl")
    assert gripper.static_predicates == {"room", "ball", "gripper"}
    assert "(ball ball1)" in gripper.describe_statics()
    assert "(ball ball1)" not in gripper.describe_state(gripper.init)
    with pytest.raises(ActionError) as err:  # a static precondition fails: still a precise message
        gripper.apply(gripper.init, gripper.parse("(move ball1 roomb)"))
    assert "(room ball1) is false" in str(err.value)
