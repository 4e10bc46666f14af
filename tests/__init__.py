"""piw's test suite: one folder per package of ``piw/``, shared helpers in ``tests.support``.

The helpers' assertions are rewritten like the tests' own, so a failing check inside one shows its values.
"""

import pytest

pytest.register_assert_rewrite("tests.support")
