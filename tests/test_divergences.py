"""Both backends answer odd arguments alike: a differential fuzz over every public method.

Each call gets, in each argument, either a valid value or an odd one (``None``, ``bool``,
floats, ``str``, ``bytes``, huge and negative ints, numpy scalars and arrays, nested lists,
sets, dicts, generators, a generator or an ``__index__`` that raises, objects of the other
backend), on the Rust binding and on the pure twin. Both must return the same value, or raise
the same exception class with the same message; a refused call changes nothing on either.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import chunked_prefill._core as rust
import chunked_prefill.pure as pure_planner
import chunked_prefill.pure_serving as pure_serving
from chunked_prefill._validate import message

# The two backends, each as one namespace of its planner and serving classes.
PURE = ModuleType("pure_both")
PURE.__dict__.update(vars(pure_planner))
PURE.__dict__.update(vars(pure_serving))
BACKENDS = (rust, PURE)

ABSENT = object()  # an argument not passed at all


class Boom(Exception):
    """Raised by the odd values that run user code."""


def _raising_gen() -> Iterator[int]:
    yield 1
    raise Boom("generator failed")


class BadIndex:
    def __index__(self) -> int:
        raise Boom("__index__ failed")

    def __repr__(self) -> str:
        return "BadIndex()"


class BadLen(list[int]):
    def __len__(self) -> int:
        raise Boom("__len__ failed")


class PairsMapping:
    """Mapping-like (``keys`` and ``items``) whose ``items()`` yields ``pairs``."""

    def __init__(self, pairs: Any) -> None:
        self.pairs = pairs

    def keys(self) -> Any:
        return [p[0] for p in self.pairs if isinstance(p, tuple)]

    def items(self) -> Any:
        return self.pairs

    def __repr__(self) -> str:
        return f"PairsMapping({self.pairs!r})"


class Opaque:
    def __repr__(self) -> str:
        return "Opaque()"


# (label, factory): a factory builds a fresh value for each call on each backend (a
# generator is used up by the first); ``b`` is the backend the value is passed to, so that a
# value "of the other backend" can be made.
Value = tuple[str, Callable[[ModuleType], Any]]

ODD: list[Value] = [
    ("None", lambda b: None),
    ("True", lambda b: True),
    ("False", lambda b: False),
    ("0", lambda b: 0),
    ("-1", lambda b: -1),
    ("2**32", lambda b: 2**32),
    ("2**63", lambda b: 2**63),
    ("2**64-1", lambda b: 2**64 - 1),
    ("2**64", lambda b: 2**64),
    ("2**128", lambda b: 2**128),
    ("-2**64", lambda b: -(2**64)),
    ("1.5", lambda b: 1.5),
    ("2.0", lambda b: 2.0),
    ("nan", lambda b: float("nan")),
    ("inf", lambda b: float("inf")),
    ("'3'", lambda b: "3"),
    ("''", lambda b: ""),
    ("b'3'", lambda b: b"3"),
    ("bytearray", lambda b: bytearray(b"\x01")),
    ("np.int64(3)", lambda b: np.int64(3)),
    ("np.uint64(2**64-1)", lambda b: np.uint64(2**64 - 1)),
    ("np.int8(-1)", lambda b: np.int8(-1)),
    ("np.bool_", lambda b: np.True_),
    ("np.float64(2.0)", lambda b: np.float64(2.0)),
    ("np.float32(0.5)", lambda b: np.float32(0.5)),
    ("np.array(5)", lambda b: np.array(5)),
    ("np.array([1, 2])", lambda b: np.array([1, 2])),
    ("np.array([-1])", lambda b: np.array([-1])),
    ("np.array([1.5])", lambda b: np.array([1.5])),
    ("np.array([[1]])", lambda b: np.array([[1]])),
    ("[]", lambda b: []),
    ("[1, 2]", lambda b: [1, 2]),
    ("[1, 1]", lambda b: [1, 1]),
    ("(3,)", lambda b: (3,)),
    ("[[1]]", lambda b: [[1]]),
    ("[None]", lambda b: [None]),
    ("[1, 'a']", lambda b: [1, "a"]),
    ("[2**64]", lambda b: [2**64]),
    ("[-1]", lambda b: [-1]),
    ("[True]", lambda b: [True]),
    ("[1.0]", lambda b: [1.0]),
    ("range(3)", lambda b: range(3)),
    ("{1, 2}", lambda b: {1, 2}),
    ("{}", lambda b: {}),
    ("{1: 2}", lambda b: {1: 2}),
    ("{1: None}", lambda b: {1: None}),
    ("{'a': 1}", lambda b: {"a": 1}),
    ("gen", lambda b: (i for i in [1, 2])),
    ("raising gen", lambda b: _raising_gen()),
    ("BadIndex", lambda b: BadIndex()),
    ("[BadIndex]", lambda b: [BadIndex()]),
    ("BadLen", lambda b: BadLen([1])),
    ("Opaque", lambda b: Opaque()),
    ("mapping of non-pairs", lambda b: PairsMapping([1])),
    ("mapping of triples", lambda b: PairsMapping([(1, 2, 3)])),
    ("mapping of lists", lambda b: PairsMapping([[1, 9]])),
    ("mapping, items not iterable", lambda b: PairsMapping(5)),
    ("mapping, items raise", lambda b: PairsMapping(_raising_gen())),
    ("{1: 2**32}", lambda b: {1: 2**32}),
    ("{-1: 1}", lambda b: {-1: 1}),
    ("{np.int64(1): np.int64(9)}", lambda b: {np.int64(1): np.int64(9)}),
    ("[np.int64(1)]", lambda b: [np.int64(1)]),
    ("np.array([2**32], uint64)", lambda b: np.array([2**32], dtype=np.uint64)),
    ("np.array([1, 2], int8)", lambda b: np.array([1, 2], dtype=np.int8)),
    ("np.array([1, 2]) big-endian", lambda b: np.array([1, 2], dtype=">i4")),
    ("np.array([])", lambda b: np.array([], dtype=np.int64)),
    ("np.array(['a'])", lambda b: np.array(["a"])),
    ("memoryview", lambda b: memoryview(b"\x01\x02")),
    ("frozenset", lambda b: frozenset({1})),
    ("dict keys", lambda b: {1: 2}.keys()),
    ("array('I')", lambda b: __import__("array").array("I", [1, 2])),
    ("[1, 2, 3, 7]", lambda b: [1, 2, 3, 7]),
    ("(1, 2)", lambda b: (1, 2)),
    ("[2**63]", lambda b: [2**63]),
    ("other Config", lambda b: _other(b).Config()),
    ("other ServingConfig", lambda b: _other(b).ServingConfig(num_blocks=4)),
    ("other Chunk", lambda b: _other(b).Chunk(1, 0, 1, True)),
    ("[other Chunk]", lambda b: [_other(b).Chunk(1, 0, 1, True)]),
    ("other BatchItem", lambda b: _other(b).BatchItem(**ITEM)),
    ("[other BatchItem]", lambda b: [_other(b).BatchItem(**ITEM)]),
    ("other Batch", lambda b: _other(b).Batch(**BATCH)),
    ("own Config", lambda b: b.Config()),
    ("own ServingConfig", lambda b: b.ServingConfig(num_blocks=4)),
    ("own Chunk", lambda b: b.Chunk(1, 0, 1, True)),
    ("[own Chunk]", lambda b: [b.Chunk(1, 0, 1, True)]),
    ("[own BatchItem]", lambda b: [b.BatchItem(**ITEM)]),
    ("own Batch", lambda b: b.Batch(**BATCH)),
]

ITEM = {
    "request_id": 1,
    "start": 0,
    "tokens": 3,
    "is_prefill": True,
    "samples": True,
    "new_blocks": (0, 1),
    "cached_tokens": 0,
}
BATCH = {"step_index": 0, "items": (), "preempted": (), "num_free_blocks": 4}


def _other(b: ModuleType) -> ModuleType:
    return PURE if b is rust else rust


def ints(*values: int) -> list[Value]:
    return [(repr(v), lambda b, v=v: v) for v in values]


def arg(*valid: Value, absent: bool = False) -> st.SearchStrategy[Value]:
    """A valid value most of the time, else an odd one (or, for an optional keyword,
    nothing)."""
    choices = [*valid, *([("<absent>", lambda b: ABSENT)] if absent else [])]
    odd = st.sampled_from(ODD)
    return st.sampled_from(choices) | odd if choices else odd


ADDRESS = re.compile(r" at 0x[0-9a-f]+")


NAMES = {rust: ("rust", "chunked_prefill._core"), PURE: ("pure", "chunked_prefill.pure")}
MODULE = re.compile(r"chunked_prefill\.(_core|pure\w*)")


def neutral(b: ModuleType, text: str) -> str:
    """``text`` with addresses left out and the backends named as this one's (``own``) or
    the other's, so that "a Config of the other backend" reads the same on both."""
    own, _ = NAMES[b]
    text = ADDRESS.sub("", text)
    text = re.sub(
        r"\b(rust|pure) backend", lambda m: "own backend" if m[1] == own else "other backend", text
    )
    return MODULE.sub(lambda m: "OWN" if (m[1] == "_core") == (b is rust) else "OTHER", text)


def outcome(
    b: ModuleType, call: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> tuple[str, str]:
    """The call's result as comparable text, or its exception's class and message."""
    try:
        result = call(*args, **kwargs)
    except Exception as exc:
        return type(exc).__name__, neutral(b, str(exc))
    return "ok", neutral(b, repr(result))


def split(b: ModuleType, values: dict[str, Value]) -> tuple[list[Any], dict[str, Any]]:
    """Positional arguments (names starting with ``_``, in order) and keywords, built for
    backend ``b``; absent ones left out."""
    args, kwargs = [], {}
    for name, (_, make) in values.items():
        value = make(b)
        if value is ABSENT:
            continue
        if name.startswith("_"):
            args.append(value)
        else:
            kwargs[name] = value
    return args, kwargs


def serving(b: ModuleType, pending: bool) -> tuple[Any, Any]:
    """A small scheduler: 1 running (a known prompt), 2 running (a length), 3 waiting; with
    ``pending``, a planned batch (both decode and sample) awaits ``update``."""
    s = b.ServingScheduler(
        b.ServingConfig(num_blocks=8, block_size=2, token_budget=8, max_running=2)
    )
    s.add_request(1, [1, 2, 3], 3)
    s.add_request(2, 3, 3)
    s.add_request(3, [5, 6], 2)
    s.update(s.schedule(), token_ids=[7, 8])
    return s, (s.schedule() if pending else None)


def snapshot(s: Any) -> str:
    """Everything a scheduler shows (its state, or with a batch pending its views)."""
    try:
        return repr(s.to_state())
    except RuntimeError:
        return repr(s) + repr([s.request(i) for i in (1, 2, 3) if i in s])


def differ(
    method: str, build: Callable[[ModuleType], tuple[Any, Any]], values: dict[str, Value]
) -> None:
    """Call ``method`` of the object ``build`` makes (the class itself for ``""``) with
    ``values`` on both backends and compare the outcomes, then what the object shows; a
    ``<pending batch>`` value is each backend's own pending batch."""
    outcomes, after = [], []
    for b in BACKENDS:
        target, batch = build(b)
        args, kwargs = split(b, values)
        args = [batch if a is PENDING else a for a in args]
        bound = getattr(target, method) if method else target
        outcomes.append(outcome(b, bound, args, kwargs))
        if not isinstance(target, type) and hasattr(target, "to_state"):
            after.append(snapshot(target))
    labels = {k: v[0] for k, v in values.items()}
    assert outcomes[0] == outcomes[1], f"{method or build}{labels}:\n{outcomes[0]}\n{outcomes[1]}"
    assert len(set(after)) <= 1, after


PENDING = object()
PENDING_VALUE: Value = ("<pending batch>", lambda b: PENDING)


def _cls(name: str) -> Callable[[ModuleType], tuple[Any, Any]]:
    return lambda b: (getattr(b, name), None)


COUNT = ints(1, 2, 4)

# -- the serving classes -----------------------------------------------------------------


@given(
    st.fixed_dictionaries(
        {
            "num_blocks": arg(*ints(4, 8), absent=True),
            "block_size": arg(*ints(1, 2, 16), absent=True),
            "token_budget": arg(*ints(8, 64), absent=True),
            "chunk_size": arg(*COUNT, absent=True),
            "max_prefills_per_step": arg(*COUNT, absent=True),
            "max_running": arg(*ints(1, 4), absent=True),
            "watermark": arg(("0.25", lambda b: 0.25), absent=True),
            "prefix_caching": arg(("True", lambda b: True), absent=True),
        }
    )
)
def test_serving_config(values: dict[str, Value]) -> None:
    differ("", _cls("ServingConfig"), values)


@given(
    st.fixed_dictionaries(
        {
            "block_size": arg(*ints(1, 2), absent=True),
            "watermark": arg(("0.5", lambda b: 0.5), absent=True),
        }
    )
)
def test_serving_config_replace(values: dict[str, Value]) -> None:
    differ("replace", lambda b: (b.ServingConfig(num_blocks=8, max_running=4), None), values)


@given(st.fixed_dictionaries({"_config": arg()}))
def test_serving_scheduler(values: dict[str, Value]) -> None:
    differ("", _cls("ServingScheduler"), values)


@given(
    st.fixed_dictionaries(
        {
            "request_id": arg(*ints(7, 1), absent=False),
            "start": arg(*ints(0, 2)),
            "tokens": arg(*ints(1, 3)),
            "is_prefill": arg(("True", lambda b: True)),
            "samples": arg(("False", lambda b: False)),
            "new_blocks": arg(("(0, 1)", lambda b: (0, 1)), ("[]", lambda b: [])),
            "cached_tokens": arg(*ints(0, 2)),
        }
    )
)
def test_batch_item(values: dict[str, Value]) -> None:
    differ("", _cls("BatchItem"), values)


@given(
    st.fixed_dictionaries(
        {
            "step_index": arg(*ints(0, 3)),
            "items": arg(
                ("()", lambda b: ()), ("[own BatchItem]", lambda b: [b.BatchItem(**ITEM)])
            ),
            "preempted": arg(("()", lambda b: ()), ("[4]", lambda b: [4])),
            "num_free_blocks": arg(*ints(0, 4)),
        }
    )
)
def test_batch(values: dict[str, Value]) -> None:
    differ("", _cls("Batch"), values)


@given(
    st.booleans(),
    st.fixed_dictionaries(
        {
            "_request_id": arg(*ints(9, 1)),
            "_prompt": arg(("[1, 2, 3]", lambda b: [1, 2, 3]), *ints(4)),
            "_max_new_tokens": arg(*ints(1, 2)),
            "priority": arg(*ints(0, -1), absent=True),
            "cache_salt": arg(*ints(0, 5), absent=True),
        }
    ),
)
def test_add_request(pending: bool, values: dict[str, Value]) -> None:
    differ("add_request", lambda b: serving(b, pending), values)


@given(
    st.booleans(),
    st.fixed_dictionaries(
        {
            "_prompt": arg(("[1, 2, 3, 7]", lambda b: [1, 2, 3, 7])),
            "cache_salt": arg(*ints(0), absent=True),
        }
    ),
)
def test_cached_prefix_tokens(pending: bool, values: dict[str, Value]) -> None:
    differ("cached_prefix_tokens", lambda b: serving(b, pending), values)


@given(
    st.fixed_dictionaries(
        {
            "_batch": arg(PENDING_VALUE, PENDING_VALUE),
            "token_ids": arg(
                ("[9, 9]", lambda b: [9, 9]), ("{1: 9}", lambda b: {1: 9}), absent=True
            ),
            "finished": arg(("[2]", lambda b: [2]), ("()", lambda b: ()), absent=True),
        }
    )
)
def test_update(values: dict[str, Value]) -> None:
    differ("update", lambda b: serving(b, True), values)


@pytest.mark.parametrize("method", ["abort", "request", "block_table", "__contains__"])
@given(pending=st.booleans(), values=st.fixed_dictionaries({"_request_id": arg(*ints(1, 3, 9))}))
def test_request_id_methods(method: str, pending: bool, values: dict[str, Value]) -> None:
    differ(method, lambda b: serving(b, pending), values)


# -- the planner -------------------------------------------------------------------------


@given(
    st.fixed_dictionaries(
        {
            "chunk_size": arg(*COUNT, absent=True),
            "max_decode_tokens": arg(*ints(0, 2), absent=True),
            "interleave_decode": arg(("False", lambda b: False), absent=True),
            "token_budget": arg(*ints(8), absent=True),
            "max_prefills_per_step": arg(*ints(1, 2), absent=True),
        }
    )
)
def test_config(values: dict[str, Value]) -> None:
    differ("", _cls("Config"), values)


@given(
    st.fixed_dictionaries(
        {"chunk_size": arg(*COUNT, absent=True), "token_budget": arg(*ints(8), absent=True)}
    )
)
def test_config_replace(values: dict[str, Value]) -> None:
    differ("replace", lambda b: (b.Config(), None), values)


@given(
    st.fixed_dictionaries(
        {
            "_request_id": arg(*ints(1)),
            "_start": arg(*ints(0)),
            "_tokens": arg(*ints(3)),
            "_is_last": arg(("True", lambda b: True)),
        }
    )
)
def test_chunk(values: dict[str, Value]) -> None:
    differ("", _cls("Chunk"), values)


@given(
    st.fixed_dictionaries(
        {
            "step_index": arg(*ints(0)),
            "decode_tokens": arg(*ints(2)),
            "chunks": arg(("[own Chunk]", lambda b: [b.Chunk(1, 0, 1, True)]), absent=True),
        }
    )
)
def test_step(values: dict[str, Value]) -> None:
    differ("", _cls("Step"), values)


@given(
    st.fixed_dictionaries(
        {
            "_request_id": arg(*ints(1)),
            "_total_tokens": arg(*ints(8)),
            "cached_tokens": arg(*ints(2), absent=True),
            "priority": arg(*ints(-1), absent=True),
            "processed_tokens": arg(*ints(3), absent=True),
        }
    )
)
def test_prefill_chunk_state(values: dict[str, Value]) -> None:
    differ("", _cls("PrefillChunkState"), values)


@pytest.mark.parametrize(
    ("method", "valid"),
    [("advance", ints(2)), ("next_chunk_size", [("own Config", lambda b: b.Config())])],
)
@given(data=st.data())
def test_prefill_chunk_state_methods(method: str, valid: list[Value], data: st.DataObject) -> None:
    values = data.draw(st.fixed_dictionaries({"_arg": arg(*valid)}))
    differ(method, lambda b: (b.PrefillChunkState(1, 8), None), values)


def planner(b: ModuleType) -> tuple[Any, Any]:
    s = b.Scheduler(b.Config(chunk_size=4, max_decode_tokens=2, token_budget=8))
    s.enqueue(1, 10)
    s.enqueue(2, 5, priority=-1)
    s.next_step(1)
    return s, None


@given(st.fixed_dictionaries({"_config": arg(("own Config", lambda b: b.Config()), absent=True)}))
def test_scheduler(values: dict[str, Value]) -> None:
    differ("", _cls("Scheduler"), values)


@given(
    st.fixed_dictionaries(
        {
            "_request_id": arg(*ints(3, 1)),
            "_total_tokens": arg(*ints(6)),
            "cached_tokens": arg(*ints(1), absent=True),
            "priority": arg(*ints(2), absent=True),
        }
    )
)
def test_enqueue(values: dict[str, Value]) -> None:
    differ("enqueue", planner, values)


@pytest.mark.parametrize("method", ["next_step", "abort", "state", "__contains__"])
@given(values=st.fixed_dictionaries({"_arg": arg(*ints(0, 1, 2, 3))}))
def test_planner_methods(method: str, values: dict[str, Value]) -> None:
    differ(method, planner, values)


# -- the items of issue 21 ------------------------------------------------------------------


@pytest.fixture(params=["rust", "pure"])
def b(request: pytest.FixtureRequest) -> ModuleType:
    """One backend, its planner and serving classes together."""
    return rust if request.param == "rust" else PURE


def not_iterable(name: str, what: str, value: Any) -> str:
    return message(
        "not_iterable",
        name=name,
        what=what,
        type_name=type(value).__name__,
        value_repr=repr(value),
    )


@pytest.mark.parametrize("finished", [None, 5, 2.0, Opaque()])
def test_update_finished_must_be_an_iterable(b: ModuleType, finished: Any) -> None:
    """``finished=None`` is refused on both backends (Rust took it as no ids), and a value
    that is no iterable names ``finished`` (not "'int' object is not iterable"); the
    refused update changes nothing, so the batch can then be reported."""
    s, batch = serving(b, True)
    before = snapshot(s)
    with pytest.raises(TypeError) as info:
        s.update(batch, token_ids=[1, 2], finished=finished)
    assert str(info.value) == not_iterable("finished", "request ids", finished)
    assert snapshot(s) == before
    assert s.update(batch, token_ids=[1, 2]) == []


def test_iterable_arguments_name_themselves(b: ModuleType) -> None:
    """Every argument that takes an iterable names itself when given something else."""
    cases = [
        (
            lambda: b.Batch(step_index=0, items=5, preempted=(), num_free_blocks=0),
            "items",
            "BatchItem values",
        ),
        (
            lambda: b.Batch(step_index=0, items=(), preempted=5, num_free_blocks=0),
            "preempted",
            "request ids",
        ),
        (lambda: b.BatchItem(**{**ITEM, "new_blocks": 5}), "new_blocks", "block ids"),
        (lambda: b.Step(step_index=0, decode_tokens=0, chunks=5), "chunks", "Chunk values"),
    ]
    for call, name, what in cases:
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == not_iterable(name, what, 5)


def test_items_are_drawn_one_by_one(b: ModuleType) -> None:
    """The first non-item is refused before the next is drawn (so an endless iterator of
    them fails at once: here the next draw would raise), and a list whose ``__len__``
    raises is iterated, not sized, on both backends."""
    with pytest.raises(TypeError, match="items must hold BatchItem values, got int: 1"):
        b.Batch(step_index=0, items=_raising_gen(), preempted=(), num_free_blocks=0)
    with pytest.raises(TypeError, match="items must hold BatchItem values, got int: 1"):
        b.Batch(step_index=0, items=BadLen([1]), preempted=(), num_free_blocks=0)


HUGE_BLOCKS = [2**61, 2**62, 2**64 - 1]


@pytest.mark.parametrize("block_size", HUGE_BLOCKS)
def test_any_u64_block_size_is_accepted(block_size: int) -> None:
    """A block size up to 2**64 - 1 is valid on both backends (the twin's packer of a block
    of ids raised ``struct.error`` above about 2**61); both then plan alike."""
    runs = []
    for m in BACKENDS:
        s = m.ServingScheduler(m.ServingConfig(num_blocks=8, block_size=block_size))
        s.add_request(1, [1, 2, 3], 2)
        s.add_request(2, 100, 1)
        batch = s.schedule()
        done = s.update(batch, token_ids=[5, 6])
        runs.append((repr(batch), done, s.to_state(), s.cached_prefix_tokens([1, 2, 3, 5])))
    assert runs[0] == runs[1]


def test_cli_simulates_a_huge_block_size_on_both_backends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from chunked_prefill.cli import main

    outputs = []
    for backend in ("pure", "rust"):
        argv = [
            "simulate",
            "--backend",
            backend,
            "--block-size",
            str(2**62),
            "--num-blocks",
            "4",
            "--requests",
            "20",
        ]
        assert main(argv) == 0
        out, err = capsys.readouterr()
        assert err == ""
        outputs.append(out.splitlines()[:-1])  # the last line is the wall time
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize(
    ("config", "prompt", "path", "length"),
    [
        ({"num_blocks": 10**12}, None, "free_queue", 10**12),
        ({"num_blocks": 2**62, "block_size": 4}, 2**63, "requests[0].tokens", 2**63),
        ({"num_blocks": 2**62, "block_size": 2**62}, 2**64 - 1, "requests[0].tokens", 2**64 - 1),
    ],
)
def test_export_too_large_is_a_memory_error(
    b: ModuleType, config: dict[str, int], prompt: int | None, path: str, length: int
) -> None:
    """``to_state()`` (and so pickling) of a scheduler too large to list raises the same
    ``MemoryError`` naming the list on both backends (Rust said ``ValueError``, the twin a
    bare ``MemoryError`` or ``OverflowError``)."""
    import pickle

    s = b.ServingScheduler(b.ServingConfig(**config))
    if prompt is not None:
        s.add_request(1, prompt, 1)
    text = message("state_too_large", path=path, len=length)
    for call in (s.to_state, lambda: pickle.dumps(s)):
        with pytest.raises(MemoryError) as info:
            call()
        assert str(info.value) == text


@pytest.mark.parametrize("tokens", [[1, None, 3], [None, 2, 3], [None, None, 3, None]])
def test_state_prompt_mixing_ids_and_none_is_refused(b: ModuleType, tokens: list[Any]) -> None:
    """A prompt is all ids or all unknown; a restored one that mixes them is refused by
    both backends (the twin accepted it)."""
    s = b.ServingScheduler(b.ServingConfig(num_blocks=8, block_size=2))
    s.add_request(1, [1, 2, 3], 2)
    state = s.to_state()
    state["requests"][0]["tokens"] = tokens
    with pytest.raises(ValueError) as info:
        b.ServingScheduler.from_state(state)
    assert str(info.value) == message(
        "state_rule",
        path="state['requests'][0]['tokens']",
        message=message("state_prompt_mixed"),
    )


def test_prompt_all_unknown_or_unknown_generated_tokens_restore(b: ModuleType) -> None:
    """The rule refuses only a mix inside the prompt: an all-unknown prompt and unknown
    generated tokens after a known prompt restore."""
    s = b.ServingScheduler(b.ServingConfig(num_blocks=8, block_size=2))
    s.add_request(1, [1, 2, 3], 3)
    s.add_request(2, 3, 3)
    s.update(s.schedule())
    state = s.to_state()
    assert [r["tokens"] for r in state["requests"]] == [[1, 2, 3, None], [None] * 4]
    assert b.ServingScheduler.from_state(state).to_state() == state


PUBLIC = {rust: "chunked_prefill._core"}


def other_backend(name: str, cls: str, own: ModuleType, module: str, other_module: str) -> str:
    own_name, other_name = ("rust", "pure") if own is rust else ("pure", "rust")
    return message(
        "other_backend",
        name=name,
        class_name=cls,
        backend=own_name,
        module=module,
        other=other_name,
        other_module=other_module,
    )


def test_objects_of_the_other_backend_are_named_as_such(b: ModuleType) -> None:
    """Every class argument given the same class of the other backend says which backend
    each is (not "must be a Batch, got Batch"), on both sides."""
    o = _other(b)
    serving_module = {rust: "chunked_prefill._core", PURE: "chunked_prefill.pure_serving"}
    planner_module = {rust: "chunked_prefill._core", PURE: "chunked_prefill.pure"}
    s, _ = serving(b, True)
    cases = [
        (
            lambda: b.ServingScheduler(o.ServingConfig(num_blocks=4)),
            "config",
            "ServingConfig",
            serving_module,
        ),
        (lambda: s.update(o.Batch(**BATCH)), "batch", "Batch", serving_module),
        (
            lambda: b.Batch(**{**BATCH, "items": [o.BatchItem(**ITEM)]}),
            "each item of items",
            "BatchItem",
            serving_module,
        ),
        (lambda: b.Scheduler(o.Config()), "config", "Config", planner_module),
        (
            lambda: b.PrefillChunkState(1, 8).next_chunk_size(o.Config()),
            "config",
            "Config",
            planner_module,
        ),
        (
            lambda: b.Step(step_index=0, decode_tokens=0, chunks=[o.Chunk(1, 0, 1, True)]),
            "each item of chunks",
            "Chunk",
            planner_module,
        ),
    ]
    for call, name, cls, modules in cases:
        with pytest.raises(TypeError) as info:
            call()
        assert str(info.value) == other_backend(name, cls, b, modules[b], modules[o])


@pytest.mark.parametrize("cls", ["ServingScheduler", "Scheduler"])
@given(values=st.fixed_dictionaries({"_state": arg()}))
def test_from_state(cls: str, values: dict[str, Value]) -> None:
    differ("from_state", _cls(cls), values)
