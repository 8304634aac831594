"""One-shot messages: taken once, put back only for a rerun by the very run that took them."""

from flowcore.ui import flash


def test_a_message_is_put_back_only_by_the_run_that_took_it():
    state: dict = {}
    flash.new_run(state)
    state["m"] = "Saved."
    assert flash.take(state, "m") == "Saved." and "m" not in state
    flash.keep(state, ["m"])  # this run reruns the page: the next run shows it again
    flash.new_run(state)
    assert flash.take(state, "m") == "Saved."
    flash.new_run(state)  # a later run that took nothing
    flash.keep(state, ["m"])
    assert "m" not in state  # an earlier run's message is never brought back
    assert flash.take(state, "m") is None


def test_a_newer_message_wins_over_the_kept_copy():
    state: dict = {}
    flash.new_run(state)
    state["m"] = "old"
    flash.take(state, "m")
    state["m"] = "new"  # a callback of this run left another
    flash.keep(state, ["m"])
    assert state["m"] == "new"
