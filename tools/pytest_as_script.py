"""python tools/pytest_as_script.py PYTEST_ARGS... FILE

Runs one unittest file under pytest (for its JUnit XML report) the way
`python FILE` would run it, as upstream's test/run_tests.sh does:
sys.argv[0] and sys.path[0] are FILE and its directory (test/dynamo/
test_dynamo_dynamic_shape.py finds examples/ from sys.argv[0]; test/spmd/
files import their neighbours), and the tests run in unittest's order, by
class and method name (pytest's own is the order of definition, and some of
upstream's tests depend on the order).
"""

import os
import sys

import pytest


class UnittestOrder:

  def pytest_collection_modifyitems(self, items):
    items.sort(key=lambda item: (getattr(item.cls, "__name__", ""), item.name))


if __name__ == "__main__":
  sys.argv[0] = sys.argv[-1]
  sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[-1]))
  sys.exit(pytest.main(sys.argv[1:], plugins=[UnittestOrder()]))
