"""The plugin API of omnitensor: every pluggy hook a backend distribution may implement.

This file is the manual (as pytest's ``hookspec.py`` is for pytest). A plugin is a module named by
an entry point in the group ``omnitensor.backends``; it holds functions decorated with
``omnitensor.hookimpl`` whose names are the hooks below. First-party backends (``ref``, ``cpu``,
``cuda``, ``wgpu``) use exactly this path; the core holds no backend names.

A minimal plugin::

    # my_backend/plugin.py  (entry point: [project.entry-points."omnitensor.backends"]
    #                                     mine = "my_backend.plugin")
    from omnitensor.backend import BackendSpec, hookimpl

    @hookimpl
    def omnitensor_register_backends() -> list[BackendSpec]:
        return [BackendSpec(name="mine", contract_version=1, priority=30,
                            probe=_probe, factory=_make, distribution="my-backend")]

    def _probe() -> str | None:
        return None  # usable; else a one-line reason ("no Vulkan adapter")

    def _make():
        from .backend import MyBackend  # heavy imports happen here, not at discovery
        return MyBackend()

How the core drives the hooks (``backend/registry.py``):

1. At first use (never at ``import omnitensor``) each entry point is loaded **on its own**: an
   import error, a hookimpl that does not match a spec, or an exception raised in a hook is
   caught there and kept as the plugin's reason to be unavailable; other plugins are unaffected.
   ``OMNITENSOR_DISABLE_PLUGINS=a,b`` skips entry points by name.
2. `omnitensor_register_backends` is called first, per plugin. The ``contract_version`` of every
   returned spec is compared with `omnitensor.backend.contract.CONTRACT_VERSION` **before any
   other hook of that plugin runs**; a plugin with a mismatch is listed as unavailable (both
   versions and the upgrade to make are named) and none of its other hooks is ever called.
3. The remaining hooks are called lazily, when the core needs them, on compatible plugins only.

Hooks never receive pluggy's ``hookwrapper`` treatment from the core; each plugin's result is
collected separately so that one failing plugin is reported by name.

Keep the entry-point module light: it must not import CuPy, numba, wgpu or create a device.
The probe is cheap; the factory does the heavy work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from ..ir.types import Type
    from .communicators import Communicator
    from .contract import Backend

__all__ = [
    "PROJECT_NAME",
    "BackendSpec",
    "CommunicatorSpec",
    "FunctionalAlternative",
    "hookimpl",
    "hookspec",
    "omnitensor_prepare_weight",
    "omnitensor_register_backends",
    "omnitensor_register_communicators",
    "omnitensor_register_functionals",
    "omnitensor_register_passes",
    "omnitensor_wrap_backend",
]

#: The pluggy project name shared by the markers and the plugin manager.
PROJECT_NAME = "omnitensor"

#: Marks a function in this module as a hook specification.
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: Marks a plugin's function as the implementation of the hook of the same name.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@dataclass(frozen=True, kw_only=True)
class BackendSpec:
    """How a plugin declares one backend (returned by `omnitensor_register_backends`).

    Attributes:
        name: the backend's name, as used by ``OMNITENSOR_BACKEND`` and ``use_backend``;
            by convention also the entry-point name (``"cpu"``).
        contract_version: the `contract.CONTRACT_VERSION` the backend was written against, as a
            literal (not imported from the core, or every check would pass).
        factory: creates the backend instance; called at most once per process (instances are
            cached by name). Heavy imports and device creation belong here. An exception raised
            here makes the backend unavailable with that reason.
        probe: cheap check, run before selection: None when the backend can run here, else the
            reason it cannot ("no CUDA device", "no Vulkan adapter"). Must not create a device
            context it keeps. Defaults to "always usable".
        priority: higher wins when ``OMNITENSOR_BACKEND`` is unset. Either an int or a
            callable evaluated only after a successful probe (wgpu's depends on the adapter:
            80 on hardware, 20 on a software rasterizer). Defaults (DESIGN §5): cuda 100,
            wgpu 80/20, cpu 50, ref 10.
        devices: optional callable returning facts for ``omnitensor backends`` (device names,
            memory, adapter kind), called only when the probe succeeded.
        distribution: the pip distribution that provides the backend
            (``"omnitensor-backend-cpu"``); filled from the entry point when left None.
    """

    name: str
    contract_version: int
    factory: Callable[[], Backend]
    probe: Callable[[], str | None] | None = None
    priority: int | Callable[[], int] = 0
    devices: Callable[[], Mapping[str, Any] | Sequence[str]] | None = None
    distribution: str | None = None


@dataclass(frozen=True, kw_only=True)
class CommunicatorSpec:
    """How a plugin declares one communicator (returned by `omnitensor_register_communicators`).

    A communicator moves host buffers between the processes of a distributed job (MPI, NCCL);
    ``omnitensor.distributed`` picks one when the process was started by a launcher.

    Attributes:
        name: the communicator's name, as used by ``OMNITENSOR_COMMUNICATOR`` (``"mpi"``).
        contract_version: the `communicators.COMMUNICATOR_CONTRACT_VERSION` it was written
            against, as a literal.
        factory: ``(timeout) -> Communicator``, called at most once per process, by
            ``omnitensor.distributed.init``; `timeout` is the seconds a collective may wait for
            the other ranks before it raises. Heavy imports (mpi4py, CuPy) and joining the job
            belong here.
        probe: cheap check: None when it can run here, else the reason ("mpi4py is not
            installed"). Must not initialize the communication library.
        priority: higher wins when ``OMNITENSOR_COMMUNICATOR`` is unset.
        distribution: the pip distribution that provides it (``"omnitensor-comm-mpi"``).
    """

    name: str
    contract_version: int
    factory: Callable[[float], Communicator]
    probe: Callable[[], str | None] | None = None
    priority: int = 0
    distribution: str | None = None


@dataclass(frozen=True, kw_only=True)
class FunctionalAlternative:
    """One named alternative implementation of a functional family (DESIGN §6).

    Attributes:
        family: the functional family it replaces (``"attention"``, ``"softmax"``).
        name: the alternative's name, unique within the family (``"flash_cuda"``).
        fn: the implementation; same signature as the family's portable implementation. It may
            emit a ``custom_call`` that carries the portable decomposition.
        backends: names of the backends it is meant for; empty means any backend.
        doc: one line for listings.
    """

    family: str
    name: str
    fn: Callable[..., Any]
    backends: tuple[str, ...] = ()
    doc: str = ""


@hookspec
def omnitensor_register_backends() -> Sequence[BackendSpec]:
    """Declare the backends this plugin provides.

    Called once per plugin, at discovery (the first time a backend is needed or listed), before
    any other hook of the plugin. Not ``firstresult``: every plugin's list is collected, and each
    plugin's call is isolated (an exception marks that plugin unavailable with the error as the
    reason).

    Must be cheap: return `BackendSpec` objects only; do not import device libraries or create
    devices (put that in `BackendSpec.factory`). Registering a name already registered by
    another plugin makes the second one unavailable ("name taken by plugin ...").

    Returns:
        A list (possibly empty, e.g. for a plugin that only wraps backends) of `BackendSpec`.
    """
    raise NotImplementedError


@hookspec
def omnitensor_register_communicators() -> Sequence[CommunicatorSpec]:
    """Declare the communicators this plugin provides (multi-process collectives).

    Called once per compatible plugin, the first time communicators are listed or
    ``omnitensor.distributed.init`` needs one (never at import). Not ``firstresult``: every
    plugin's list is collected. The ``contract_version`` of each spec is compared with
    `communicators.COMMUNICATOR_CONTRACT_VERSION` before the spec can be used; a mismatch lists
    the communicator as unavailable with both versions. An exception marks this plugin's
    communicators unavailable with the error as the reason.

    Must be cheap: return `CommunicatorSpec` objects only; do not import mpi4py or join a job.

    Returns:
        A list (possibly empty) of `CommunicatorSpec`.
    """
    raise NotImplementedError


@hookspec
def omnitensor_register_functionals() -> Sequence[FunctionalAlternative]:
    """Offer alternative implementations of functional families (fused kernels, DESIGN §6).

    Called once per compatible plugin, the first time the functional registry asks (see
    `registry.functional_alternatives`). Not ``firstresult``: all plugins' lists are concatenated
    in plugin load order. Alternatives are never chosen silently: the functional registry picks
    the portable implementation unless an override names an alternative, and the conformance
    suite checks every alternative against the portable one.

    Returns:
        A list of `FunctionalAlternative`.
    """
    raise NotImplementedError


@hookspec
def omnitensor_register_passes(backend_name: str) -> Sequence[Any]:
    """Contribute optimizer passes that run only when compiling for `backend_name`.

    Called once per (compatible plugin, backend name) when the optimizer pipeline for that
    backend is first built; the results are cached. Not ``firstresult``: passes from all plugins
    are appended, in plugin load order, after the default pipeline.

    The pass objects are opaque to the registry: the optimizer pipeline (``optimizer/pipeline``)
    defines what a pass is (a callable ``Function -> Function`` or a rule list); a plugin
    returns an empty list for backends it does not know.

    Args:
        backend_name: the name of the backend a pipeline is being built for (``"cuda"``).

    Returns:
        A list of passes (possibly empty).
    """
    raise NotImplementedError


@hookspec(firstresult=True)
def omnitensor_prepare_weight(backend: Backend, name: str, array: Any, type: Type) -> Any | None:
    """Repack a parameter for `backend` once, at load (e.g. quantized blocks into a GPU layout).

    Called by the tensor/model layer for each parameter uploaded to a backend, before its first
    use; the result is cached per parameter (and recomputed when the parameter's buffer changes).
    ``firstresult``: plugins are asked in load order and the first non-None result wins; None from
    all means "use the plain uploaded buffer". An exception raises `omnitensor.errors.PluginError`
    naming the plugin (a wrong weight must never be used silently).

    Args:
        backend: the backend instance the weight is for; return None unless it is yours
            (``backend.name == "cuda"``).
        name: the parameter's stable dotted name (``"blk.0.attn_q.weight"``).
        array: the parameter's data: a host numpy array, or the backend buffer already uploaded.
        type: its PTIR type (`TensorType`, or `QTensorType` for quantized blocks).

    Returns:
        The prepared backend buffer, or None to decline.
    """
    raise NotImplementedError


@hookspec
def omnitensor_wrap_backend(backend: Backend) -> Backend | None:
    """Wrap a freshly created backend (dumping programs, profiling, tracing).

    Called once per backend instance, right after its factory ran and before the instance is
    cached and handed out. Not ``firstresult``: every compatible plugin is asked in load order and
    each non-None result replaces the backend passed to the next plugin, so wrappers nest. An
    exception marks the wrapping plugin as broken (with the error as its reason) and its wrapper
    is skipped; the backend itself stays usable.

    Args:
        backend: the backend (possibly already wrapped by an earlier plugin).

    Returns:
        A `Backend` that delegates to `backend`, or None to leave it as it is.
    """
    raise NotImplementedError
