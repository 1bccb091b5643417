"""Unit tests of the retry policy with a fake sleep and random source."""

import pytest

from idem_client import (InProgress, InvalidRequest, RetryPolicy, ServerError, Unavailable)


def unavailable() -> Unavailable:
    return Unavailable("store down", status=503, type="urn:idem:problem:store_unavailable")


def test_ceilings_double_from_100ms_and_cap_at_5s():
    policy = RetryPolicy()
    assert [policy.ceiling(n) for n in range(9)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert policy.ceiling(10_000) == 5.0


def test_delay_is_full_jitter_below_the_ceiling():
    draws = iter([0.0, 0.5, 0.25])
    policy = RetryPolicy(random=lambda: next(draws))
    assert [policy.delay(0), policy.delay(2), policy.delay(6)] == [0.0, 0.2, 1.25]


def test_defaults_are_four_attempts():
    assert RetryPolicy().max_attempts == 4
    assert RetryPolicy.none().max_attempts == 1


def test_retries_an_unavailable_call_until_it_answers():
    sleeps, calls = [], []

    def call():
        calls.append(1)
        if len(calls) < 3:
            raise unavailable()
        return "answer"

    policy = RetryPolicy(sleep=sleeps.append, random=lambda: 1.0)
    assert policy.run(call) == "answer"
    assert len(calls) == 3
    assert sleeps == [0.1, 0.2]


def test_gives_up_after_max_attempts_with_the_attempt_count():
    sleeps, calls = [], []

    def call():
        calls.append(1)
        raise unavailable()

    policy = RetryPolicy(max_attempts=5, sleep=sleeps.append, random=lambda: 1.0)
    with pytest.raises(Unavailable) as info:
        policy.run(call)
    assert info.value.attempts == 5
    assert len(calls) == 5
    assert sleeps == [0.1, 0.2, 0.4, 0.8]


def test_the_cap_bounds_every_sleep():
    sleeps = []
    policy = RetryPolicy(max_attempts=10, base=1.0, cap=3.0, sleep=sleeps.append,
                         random=lambda: 1.0)
    with pytest.raises(Unavailable):
        policy.run(lambda: (_ for _ in ()).throw(unavailable()))
    assert sleeps == [1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]


@pytest.mark.parametrize("error", [
    InProgress("held", status=409, outcome="in_progress", retry_after=3),
    InvalidRequest("bad key", status=400),
    ServerError("teapot", status=418),
])
def test_does_not_retry_a_final_answer(error):
    sleeps, calls = [], []

    def call():
        calls.append(1)
        raise error

    with pytest.raises(type(error)) as info:
        RetryPolicy(sleep=sleeps.append).run(call)
    assert info.value.attempts == 1
    assert (len(calls), sleeps) == (1, [])


def test_retries_a_5xx_server_error():
    sleeps, calls = [], []

    def call():
        calls.append(1)
        if len(calls) == 1:
            raise ServerError("internal", status=500)
        return 7

    assert RetryPolicy(sleep=sleeps.append, random=lambda: 0.5).run(call) == 7
    assert sleeps == [0.05]


def test_an_exception_that_is_not_an_idem_error_passes_through_at_once():
    sleeps = []
    with pytest.raises(KeyError):
        RetryPolicy(sleep=sleeps.append).run(lambda: {}["x"])
    assert sleeps == []


def test_rejects_an_invalid_policy():
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(base=-1)
