"""The backend layer: the contract every backend implements, the hook specs, discovery/selection.

Backends themselves live in separate distributions (``omnitensor-backend-<name>``); nothing here
imports one.
"""

from .contract import CONTRACT_VERSION as CONTRACT_VERSION
from .contract import Backend as Backend
from .contract import Capabilities as Capabilities
from .contract import Executable as Executable
from .hookspecs import BackendSpec as BackendSpec
from .hookspecs import CommunicatorSpec as CommunicatorSpec
from .hookspecs import FunctionalAlternative as FunctionalAlternative
from .hookspecs import hookimpl as hookimpl
from .hookspecs import hookspec as hookspec
from .registry import BackendInfo as BackendInfo
from .registry import backend_passes as backend_passes
from .registry import current_backend_name as current_backend_name
from .registry import functional_alternatives as functional_alternatives
from .registry import get_backend as get_backend
from .registry import list_backends as list_backends
from .registry import prepare_weight as prepare_weight
from .registry import register_plugin as register_plugin
from .registry import use_backend as use_backend

__all__ = [
    "CONTRACT_VERSION",
    "Backend",
    "BackendInfo",
    "BackendSpec",
    "Capabilities",
    "CommunicatorSpec",
    "Executable",
    "FunctionalAlternative",
    "backend_passes",
    "current_backend_name",
    "functional_alternatives",
    "get_backend",
    "hookimpl",
    "hookspec",
    "list_backends",
    "prepare_weight",
    "register_plugin",
    "use_backend",
]
