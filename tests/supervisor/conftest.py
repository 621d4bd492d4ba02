"""The grounding tests' mission runner serves the supervisor's tests too."""

from tests.grounding.conftest import run_mission  # noqa: F401
