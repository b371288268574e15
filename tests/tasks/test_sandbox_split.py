"""The plain-data crossing between the candidate's process and the harness (sandbox_split.py): every plain value
comes back equal and of its exact type, nothing else crosses, and a decoded value is built of the decoder's own
types whatever the tree says."""

from __future__ import annotations

import collections
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dllm_bench.tasks.sandbox import bootstrap_code
from dllm_bench.tasks.sandbox_split import CROSSING_DEPTH, Uncrossable, _codec, decode_value, encode_value

SCALARS = st.none() | st.booleans() | st.integers() | st.integers(min_value=-(10 ** 60), max_value=10 ** 60) \
    | st.floats(allow_nan=False) | st.text(max_size=8) | st.binary(max_size=8) | st.complex_numbers(allow_nan=False)
HASHABLE = st.recursive(SCALARS, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3),
                        max_leaves=8)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.sets(HASHABLE, max_size=3)
    | st.dictionaries(HASHABLE, inner, max_size=3) | st.builds(bytearray, st.binary(max_size=8))
    | st.builds(collections.Counter, st.dictionaries(st.text(max_size=2), st.integers(), max_size=3))
    | st.builds(collections.OrderedDict, st.dictionaries(HASHABLE, inner, max_size=3))
    | st.builds(collections.deque, st.lists(inner, max_size=3)), max_leaves=20)


def _same(a, b) -> bool:
    """Equal and of the same exact type, all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple, collections.deque)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


DUMPS, LOADS = _codec()


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_plain_data_crosses_unchanged(value):
    text = DUMPS({"value": encode_value(value)})  # the pipe carries JSON text
    assert json.loads(text) == LOADS(text)  # the C scanner reads what the json package reads
    assert _same(decode_value(LOADS(text)["value"]), value)


def test_a_message_is_one_json_value():
    with pytest.raises(ValueError):
        LOADS('{"value":1}{"value":2}')
    with pytest.raises(ValueError):
        LOADS('{"value":NaN}')


def test_the_bootstrap_fits_one_argv_word():
    """The kernel refuses an argv word over MAX_ARG_STRLEN (32 pages: 131072 bytes) with E2BIG."""
    assert len(bootstrap_code()) < 131072


def test_nan_infinities_and_signed_zero_cross():
    for x in (float("nan"), float("inf"), -float("inf"), -0.0, 5e-324):
        assert _same(decode_value(LOADS(DUMPS(encode_value(x)))), x)


class _Liar:
    def __eq__(self, other):
        return True


class _LyingInt(int):
    def __eq__(self, other):
        return True


@pytest.mark.parametrize("value", [_Liar(), _LyingInt(3), [1, _LyingInt(2)], (x for x in ()), print, math,
                                   type("L", (list,), {})(), {"k": _Liar()}])
def test_anything_else_does_not_cross(value):
    with pytest.raises(Uncrossable):
        encode_value(value)


def test_a_self_containing_value_does_not_cross():
    loop: list = []
    loop.append(loop)
    with pytest.raises(Uncrossable, match=f"nested more than {CROSSING_DEPTH}"):
        encode_value(loop)


def test_references_cross_only_where_the_decoder_resolves_them():
    with pytest.raises(Uncrossable):
        decode_value({"g": "root"})
    assert decode_value([{"g": "root"}], {"root": "the candidate's root"}.__getitem__) == ["the candidate's root"]
