"""The docs' offline adapter example runs after the README install, which has no pytest.

Before, ``from piw.testing import OpenAIStub`` imported pytest at module level, so the example in
docs/providers.md failed with ``ModuleNotFoundError: No module named 'pytest'`` outside the dev extra. This runs the
example from the docs themselves in a fresh interpreter where pytest cannot be imported (a subprocess: what is
imported is the point), with its endless wait replaced by one request through the real OpenAI adapter.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "providers.md"

DRIVE = """
from piw.providers.base import ChatRequest
from piw.config.settings import ProviderConfig
from piw.providers.messages import UserMessage
from piw.providers.openai_compat import OpenAICompatProvider
from piw.providers.selection import ProviderSelection
import threading
selection = ProviderSelection("local", "m", ProviderConfig(base_url=stub.base_url, models=["m"]))
provider = OpenAICompatProvider(selection)
request = ChatRequest(model="m", messages=[UserMessage(content="The app crashes on save.")])
events = list(provider.stream(request, threading.Event()))
print("REPLY:", events[-1].message.content[0].text)
print("PYTEST LOADED:", "pytest" in sys.modules and sys.modules["pytest"] is not None)
stub.close()
"""


def _example() -> str:
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("### A local server to try the adapter offline", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)[:1]
    assert "while True:" in code  # the example waits forever; the test drives it instead
    return code.split("while True:", 1)[0]


def test_the_offline_adapter_example_runs_without_pytest() -> None:
    program = "import sys\nsys.modules['pytest'] = None  # as after 'pip install piw': no pytest\n"
    program += _example() + DRIVE
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "REPLY: Thanks, we are on it." in done.stdout
    assert "PYTEST LOADED: False" in done.stdout
    assert '"messages"' in done.stdout  # the example printed the request piw sent


def test_the_fixture_is_still_a_pytest_plugin(openai_stub: object) -> None:
    from piw.testing import OpenAIStub

    assert isinstance(openai_stub, OpenAIStub)
