import ast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etkit.errors import EtkitError
from etkit.literal import MAX_DEPTH, LiteralError, parse_literal

scalars = st.one_of(st.integers(), st.booleans(), st.none(), st.text(max_size=12),
                    st.floats(allow_nan=False, allow_infinity=False))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.tuples(inner, inner),
                                                       st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                      max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(values)
def test_parses_what_python_renders(value):
    text = repr(value)  # str() of a list is the repr of its items: what host traces and IOInfo carry
    assert parse_literal(text) == ast.literal_eval(text)


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "[1 2]", "[1,,2]", "[", "]", "1 2", "{1:}", "[1:2]", "{[1]: 2}", "",
    "[x]", "lambda: 1", "(1)(2)", "[1] + [2]", "'abc", "{'a' 1}",
])
def test_rejects_anything_but_literals(text):
    with pytest.raises(LiteralError) as err:
        parse_literal(text, what="rank 3 node 7 field in_split_size")
    assert "rank 3 node 7 field in_split_size" in str(err.value)
    assert isinstance(err.value, EtkitError)


def test_depth_is_bounded():
    parse_literal("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    with pytest.raises(LiteralError, match="nesting"):
        parse_literal("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_json_spellings_and_escapes():
    assert parse_literal('[true, false, null, "a\\"b", \'c\\\'d\', "\\u00e9"]') == [True, False, None, 'a"b', "c'd", "é"]
