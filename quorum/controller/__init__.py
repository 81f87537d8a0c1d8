"""The controller's pure propose/replay state machine (docs/architecture.md#the-controller,
docs/conventions.md#propose-and-replay).

``state_machine.ControllerStateMachine`` is the entry point; ``topics``, ``brokers`` and
``describe`` hold the operations as pure functions of an image, ``requests`` the request and
response types, ``names`` / ``configs`` / ``placement`` the rules they apply.
"""

from quorum.controller.result import ControllerResult
from quorum.controller.state_machine import ControllerConfig, ControllerStateMachine

__all__ = ["ControllerConfig", "ControllerResult", "ControllerStateMachine"]
