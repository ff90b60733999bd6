"""The messages of backend selection: not installed, cannot run here, wrong contract version.

Each names the backend and the remedy (what to ``pip install``, what to upgrade, where to look).
First-party names serve the hints only; selection never prefers them.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Final

from ..errors import BackendNotInstalledError, BackendUnavailableError
from .contract import CONTRACT_VERSION
from .hookspecs import BackendSpec
from .rules import FIRST_PARTY, distribution_for

__all__ = ["INSTALL_HINT", "contract_message", "not_installed", "unavailable"]

#: What to install when no backend is installed at all.
INSTALL_HINT: Final = (
    "pip install omnitensor-backend-cpu (portable, fast) or omnitensor-backend-ref (reference); "
    "for GPUs omnitensor-backend-cuda or omnitensor-backend-wgpu (from a checkout of the "
    "repository: pip install ./packages/backend-cpu, and so on)"
)


def not_installed(name: str, source: str, installed: Iterable[str]) -> BackendNotInstalledError:
    """Backend `name` is not installed: list what is, and suggest a name or a distribution."""
    names = sorted(installed)
    listing = f" (installed: {', '.join(names) or 'none'})"
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if close:
        remedy = f"did you mean {close[0]!r}?"
    else:
        known = difflib.get_close_matches(name, FIRST_PARTY, n=1, cutoff=0.6)
        target = known[0] if known and known[0] != name else name
        hint = f"did you mean {target!r}? " if target != name else ""
        remedy = (f"{hint}pip install {distribution_for(target)}" + (
            f" (from a checkout: pip install ./packages/backend-{target})"
            if target in FIRST_PARTY else ""))
    return BackendNotInstalledError(
        f"{source}backend {name!r} is not installed{listing}; {remedy}", backend=name
    )


def unavailable(name: str, reason: str, source: str) -> BackendUnavailableError:
    """Backend `name` is installed but cannot run here, for `reason`."""
    return BackendUnavailableError(
        f"{source}backend {name!r} is installed but cannot run here: {reason}; "
        f"run `omnitensor backends` to see what is usable",
        backend=name,
    )


def contract_message(spec: BackendSpec, plugin_distribution: str | None) -> str:
    """Why a plugin built for another contract version is unavailable, and what to upgrade."""
    dist = spec.distribution or plugin_distribution or distribution_for(spec.name)
    if spec.contract_version > CONTRACT_VERSION:
        remedy = "upgrade omnitensor (pip install -U omnitensor)"
    else:
        remedy = f"upgrade the backend (pip install -U {dist})"
    return (
        f"incompatible backend contract (got version {spec.contract_version} from {dist}, "
        f"expected {CONTRACT_VERSION} by omnitensor); {remedy}"
    )
