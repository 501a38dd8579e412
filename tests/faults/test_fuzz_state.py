"""Fuzz ``load_state_dict`` of every stateful object with hypothesis-generated dicts.

The candidates are valid states (of the object itself and of every other kind, at several
positions), the same with one to three random edits anywhere in the nesting (a key deleted,
added or replaced by an edge value or random JSON), and random JSON. For every candidate:

* ``load_state_dict`` either accepts it or raises a documented error (``TypeError`` or
  ``ValueError``, ``StateMismatchError`` included) -- anything else fails, and so does a
  call that runs for more than a few CPU seconds (a hang);
* after a refusal the object is as before: the same ``state_dict()``, its live iterator and
  a fresh one yield what an untouched twin yields;
* after an acceptance the object still works: its ``state_dict()`` is plain JSON, it iterates
  (or raises a documented error), and a fresh object accepts the state it now reports.

Seeded by ``LRD_FAULT_SEED``.
"""

from __future__ import annotations

import copy
import json
import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from faults.campaign import soak
from faults.summary import SUMMARY
from faults.targets import TARGETS, advance, take

DOCUMENTED = (TypeError, ValueError)  # StateMismatchError is a ValueError
EXAMPLES = 1500 if soak() else 120
CPU_SECONDS = 3.0

EDGE_INTS = (-1, 0, 1, 2, 3, 5, 6, 9, 10, 11, 12, 13, 2**31, 2**63 - 1, 2**63, 2**64)
KEYS = (
    "version",
    "kind",
    "fingerprint",
    "epoch",
    "consumed",
    "num_replicas",
    "schedule",
    "inner",
    "position",
    "pass",
    "offset",
    "index",
    "sampler",
    "batches_yielded",
    "batch_size",
    "mode",
    "plan_end",
    "weights",
    "temperature",
    "seed",
)
LEAVES = st.one_of(
    st.sampled_from(EDGE_INTS),
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=6),
    st.sampled_from(KEYS),
)
JSON = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


class Hang(BaseException):
    """Raised by the watchdog; a ``BaseException`` so that no ``except Exception`` eats it."""


@contextmanager
def watchdog(seconds: float = CPU_SECONDS) -> Iterator[None]:
    """Interrupt the block after ``seconds`` of CPU time.

    SIGVTALRM, not SIGALRM: pytest-timeout uses SIGALRM for its own limit.
    """

    def interrupt(signum: int, frame: object) -> None:
        raise Hang(f"still running after {seconds} CPU seconds")

    previous = signal.signal(signal.SIGVTALRM, interrupt)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


@cache
def valid_states(name: str) -> tuple[str, ...]:
    """JSON of the states of target ``name`` at a few positions and epochs."""
    states = []
    for items, epoch in ((0, 0), (3, 0), (7, 1), (4, 2)):
        target = TARGETS[name]()
        advance(target, items, epoch)
        states.append(json.dumps(target.state_dict()))
    return tuple(states)


def all_states() -> list[str]:
    return [state for name in sorted(TARGETS) for state in valid_states(name)]


def edit(draw: st.DrawFn, node: Any) -> Any:
    """One random edit somewhere inside ``node`` (a copy)."""
    if isinstance(node, (dict, list)) and node:
        keys = sorted(node) if isinstance(node, dict) else list(range(len(node)))
        key = draw(st.sampled_from(keys))
        how = draw(st.sampled_from(("descend", "descend", "replace", "delete", "add")))
        out: Any = dict(node) if isinstance(node, dict) else list(node)
        if how == "descend":
            out[key] = edit(draw, node[key])
        elif how == "replace":
            out[key] = draw(JSON)
        elif how == "delete":
            del out[key]
        elif isinstance(out, dict):
            out[draw(st.sampled_from(KEYS) | st.text(max_size=6))] = draw(JSON)
        else:
            out.append(draw(JSON))
        return out
    if isinstance(node, int) and not isinstance(node, bool) and draw(st.booleans()):
        return node + draw(st.sampled_from((-1, 1, -(2**63), 2**63)))
    return draw(JSON)


@st.composite
def candidates(draw: st.DrawFn, name: str) -> Any:
    pool = st.sampled_from(valid_states(name)) | st.sampled_from(all_states())
    how = draw(st.sampled_from(("valid", "edited", "edited", "edited", "random")))
    if how == "random":
        return draw(JSON)
    state = json.loads(draw(pool))
    if how == "edited":
        for _ in range(draw(st.integers(1, 3))):
            state = edit(draw, state)
    return state


def check_refused(target: Any, twin: Any, lives: tuple[Any, Any], before: Any) -> None:
    assert target.state_dict() == before, "the refused load changed state_dict()"
    if lives[0] is not None:
        assert take(lives[0], 4) == take(lives[1], 4), "the refused load changed the live iterator"
    assert take(target) == take(twin), "the refused load changed what a fresh iterator yields"


def check_accepted(name: str, target: Any) -> None:
    saved = target.state_dict()
    json.dumps(saved, allow_nan=False)
    try:
        take(target, 8)
    except DOCUMENTED:
        return  # a corrupted position may be refused when it is applied
    TARGETS[name]().load_state_dict(json.loads(json.dumps(saved)))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_load_state_dict_survives_fuzzing(name: str, fault_seed: int) -> None:
    make = TARGETS[name]

    @seed(fault_seed)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(state=candidates(name), items=st.integers(0, 7), epoch=st.integers(0, 2))
    def fuzz(state: Any, items: int, epoch: int) -> None:
        SUMMARY.fuzz_examples[name] += 1
        target, twin = make(), make()
        lives = (advance(target, items, epoch), advance(twin, items, epoch))
        before = copy.deepcopy(target.state_dict())
        refusal = ""
        try:
            try:
                with watchdog():
                    target.load_state_dict(copy.deepcopy(state))
            except DOCUMENTED as error:
                SUMMARY.fuzz_refused += 1
                refusal = f" (after refusing it: {error})"
                with watchdog():
                    check_refused(target, twin, lives, before)
                return
            SUMMARY.fuzz_accepted += 1
            with watchdog():
                check_accepted(name, target)
        except (Hang, Exception) as failure:
            text = f"{type(failure).__name__}: {failure}{refusal}"
            raise AssertionError(f"{name}: state {state!r}: {text}") from failure

    fuzz()


def busy() -> None:
    while True:
        math.sqrt(2.0)


def test_the_watchdog_interrupts_a_busy_loop() -> None:
    with watchdog(0.2), pytest.raises(Hang):
        busy()
