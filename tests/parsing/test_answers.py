def test_message_problem_refuses_control_characters_and_lone_surrogates_but_not_line_breaks():
    from pivotgym.parsing import message_problem

    assert message_problem("Done.\r\nThank you,\tbye.") is None
    assert message_problem("\x1b[1mBold\x1b[0m answer") is None  # escape sequences are dropped, not refused
    assert "control characters" in message_problem("\x00" * 8 + '(a\x00b)\x00{"name": "\x00"}')
    assert "lone surrogates" in message_problem("answer \ud800 (\udfff)")
    assert "longer than" in message_problem("(A)" * 10_000)
