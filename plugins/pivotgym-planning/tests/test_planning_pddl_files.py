"""Reading and cleaning pddlgym's files."""

from pivotgym_planning.pddl_files import (
    action_literal_names,
    domain_file,
    parse_sexpr,
    problem_files,
    strip_action_literals,
    to_text,
)


def test_action_literals_are_stripped_from_domain_and_problem():
    dom = domain_file("blocks").read_text()
    prob = problem_files("blocks")[0].read_text()
    assert action_literal_names(dom) == {"pickup", "putdown", "stack", "unstack"}
    clean_dom, clean_prob = strip_action_literals(dom, prob)
    dom_tree, prob_tree = parse_sexpr(clean_dom)[0], parse_sexpr(clean_prob)[0]
    preds = next(sec for sec in dom_tree if isinstance(sec, list) and sec[0] == ":predicates")
    assert {p[0] for p in preds[1:]} == {"on", "ontable", "clear", "handempty", "handfull", "holding"}
    init = next(sec for sec in prob_tree if isinstance(sec, list) and sec[0] == ":init")
    assert init[1:] and all(atom[0] not in {"pickup", "putdown", "stack"} for atom in init[1:])
    # the action named "stack" is kept; only the predicate of that name disappears from its precondition
    stack = next(sec for sec in dom_tree if isinstance(sec, list) and sec[:2] == [":action", "stack"])
    precondition = stack[stack.index(":precondition") + 1]
    assert ["holding", "?x"] in precondition and all(a[0] != "stack" for a in precondition[1:])


def test_domains_without_literals_are_unchanged_in_meaning():
    dom = domain_file("gripper").read_text()
    prob = problem_files("gripper")[0].read_text()
    assert action_literal_names(dom) == set()
    clean_dom, _ = strip_action_literals(dom, prob)
    assert parse_sexpr(clean_dom) == parse_sexpr(dom)


def test_sexpr_roundtrip_and_natural_order():
    tree = parse_sexpr("(define (x ?a - t) ; comment\n (and (p a) (q)))")
    assert parse_sexpr(to_text(tree[0])) == tree
    names = [p.stem for p in problem_files("hanoi_test")]
    assert names == sorted(names, key=lambda n: int(n.rsplit("problem", 1)[1]))
