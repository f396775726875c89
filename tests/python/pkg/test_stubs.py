"""The type stubs (_sjkv.pyi) name the parameters the module takes: each top-level function's
parameter names, in order, as pybind11's signature line gives them."""
import ast
import os
import re

import sjkv
from sjkv import _sjkv


def test_every_stub_function_has_the_modules_parameters():
    stub = os.path.join(os.path.dirname(sjkv.__file__), "_sjkv.pyi")
    tree = ast.parse(open(stub).read())
    checked = 0
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        fn = getattr(_sjkv, node.name)
        first = fn.__doc__.splitlines()[0]  # "name(a: T, b: U = x) -> R"
        inside = first[first.index("(") + 1:first.rindex(")")]
        names = re.findall(r"(?:^|, )(\w+): ", inside)
        assert [a.arg for a in node.args.args] == names, node.name
        checked += 1
    assert checked >= 15
