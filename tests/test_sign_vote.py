"""Issue 30: the sign vote (the robust learning rate of Ozdayi et al. 2021, asynchronous): a parameter
only the attackers push steps back, one the fleet agrees on steps as sent, a device votes once, the oldest
silent device makes room, and the votes survive a restart through the store's codec."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from server.settings import Settings
from server.store.codec import decode_state, encode_state
from server.strategies import Arrival, SignVote, make_strategy, wrap
from server.strategies.sign_vote import SignVoteSettings


def arrival(gradient, device: str, task: str = "t") -> Arrival:
    return Arrival(task, device, 0, 0, np.asarray(gradient, np.float32), None, 1, 1.0, 0.0)


def last_pushed(strategy) -> np.ndarray:
    return strategy.inner.buffer[-1].gradient


@pytest.mark.parametrize(("against", "factor"), [("flip", -1.0), ("zero", 0.0)])
def test_a_parameter_only_the_attackers_push_does_not_step_their_way(against, factor):
    vote = SignVote(make_strategy("dynsgd", k=100), threshold=0.4, against=against, count="sign")
    for i in range(7):  # honest: all agree on parameter 0, none touch parameter 1 (a dark pixel's weight)
        vote.receive(arrival([1.0, 0.0], f"honest{i}"))
    for i in range(3):  # attackers: along the honest on 0, and all of them on the backdoor's parameter 1
        vote.receive(arrival([1.0, 5.0], f"attacker{i}"))
    np.testing.assert_allclose(last_pushed(vote), [1.0, 5.0 * factor])  # |3| < 0.4 × 10 on parameter 1
    vote.receive(arrival([2.0, 0.0], "honest0"))
    np.testing.assert_allclose(last_pushed(vote), [2.0, 0.0])  # 10 of 10 agree on parameter 0
    assert vote.describe()["sign_vote_reversed"] == pytest.approx(0.5)


def test_a_device_votes_once_however_often_it_pushes():
    vote = SignVote(make_strategy("dynsgd", k=100), threshold=0.4, against="flip", count="sign")
    for i in range(6):
        vote.receive(arrival([1.0, 0.0], f"honest{i}"))
    for _ in range(20):  # one attacker pushing again and again is still one vote of 7
        vote.receive(arrival([1.0, 1.0], "attacker"))
    assert len(vote.votes) == 7 and vote.tally.tolist() == [7, 1]
    np.testing.assert_allclose(last_pushed(vote), [1.0, -1.0])


def test_the_longest_silent_device_makes_room():
    vote = SignVote(make_strategy("dynsgd", k=100), devices=3, count="sign")
    for device, g in (("a", [1.0]), ("b", [1.0]), ("c", [-1.0]), ("a", [1.0]), ("d", [1.0])):
        vote.receive(arrival(g, device))
    assert list(vote.votes) == ["c", "a", "d"] and vote.tally.tolist() == [1]  # b, silent longest, left


def test_by_support_a_parameter_moves_when_enough_devices_move_it_whichever_way():
    vote = SignVote(make_strategy("dynsgd", k=100), threshold=0.4)  # the default: support, zero
    for i in range(7):  # non-IID honest devices: opposite directions on parameter 0, none on parameter 1
        vote.receive(arrival([(-1.0) ** i, 0.0], f"honest{i}"))
    for i in range(3):
        vote.receive(arrival([1.0, 5.0], f"attacker{i}"))
    np.testing.assert_allclose(last_pushed(vote), [1.0, 0.0])  # support 10 of 10 on 0, 3 of 10 on 1
    assert vote.tally.tolist() == [10, 3]


def test_with_a_floor_a_device_supports_only_what_it_moves_materially():
    vote = SignVote(make_strategy("dynsgd", k=100), threshold=0.4, floor=0.5)
    for i in range(7):  # honest: parameter 1 moved, but by a hair (1% of the device's mean |g|)
        vote.receive(arrival([2.0, 0.02, 1.0], f"honest{i}"))
    for i in range(3):
        vote.receive(arrival([2.0, 5.0, 1.0], f"attacker{i}"))
    assert vote.tally.tolist() == [10, 3, 7]  # the attackers move 2 by less than half their mean |g|
    np.testing.assert_allclose(last_pushed(vote), [2.0, 0.0, 1.0])


def test_the_votes_survive_a_restart_through_the_stores_codec():
    strategy = wrap(make_strategy("fedbuff-equal"), [SignVoteSettings(threshold=0.5)])
    rng = np.random.default_rng(0)
    for i in range(30):
        strategy.receive(arrival(rng.normal(size=37), f"d{i % 12}", f"t{i}"))
    restarted = wrap(make_strategy("fedbuff-equal"), [SignVoteSettings(threshold=0.5)])
    restarted.load_state_dict(decode_state(encode_state(strategy.state_dict())))
    assert list(restarted.votes) == list(strategy.votes)
    np.testing.assert_array_equal(restarted.tally, strategy.tally)
    for device in strategy.votes:
        np.testing.assert_array_equal(restarted.votes[device], strategy.votes[device])
    more = arrival(rng.normal(size=37), "new")
    strategy.receive(more), restarted.receive(more)
    np.testing.assert_array_equal(last_pushed(restarted), last_pushed(strategy))


def test_the_settings_take_it_and_refuse_a_threshold_out_of_range():
    settings = Settings(_env_file=None, wrappers=[{"name": "sign-vote", "threshold": 0.3, "against": "zero"}])
    assert settings.wrappers[0] == SignVoteSettings(threshold=0.3, against="zero")
    bad_ones = ({"threshold": 0}, {"threshold": 1.5}, {"against": "sideways"}, {"devices": 0}, {"count": "x"})
    for bad in bad_ones:
        with pytest.raises(ValidationError):
            SignVoteSettings(**bad)
    assert all(field.description for key, field in SignVoteSettings.model_fields.items() if key != "name")
