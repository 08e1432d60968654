"""dcps: the Python side of the dcps parameter server.

The C extension ``dcps._dcps`` binds libdcps's worker step (``<dcps/step.h>``):
``Step(job, rank, n, overrides=())`` is one worker rank of a job for a model of
``n`` float32 parameters; ``start``, ``run``, ``finish`` push gradients and pull
parameters through the shards, with the job's compression, consistency model and
pipeline. ``dcps.torch`` puts a PyTorch model on top of it; ``dcps.checkpoint``
reads the shards' checkpoint files without shards.

Every failure raises ``dcps.Error`` or a subclass (``ConfigError``,
``ConnectionError``, ``AuthError``, ``SizeError``, ``StateError``,
``NoGPUError``, ``NonFiniteError``, ``ArrayError``) whose ``code`` is the
library's ``DCPS_E_...`` value and whose message is the library's sentence.
"""
from ._dcps import (  # noqa: F401  (the package's public names)
    ArrayError,
    AuthError,
    ConfigError,
    ConnectionError,
    Error,
    NoGPUError,
    NonFiniteError,
    SizeError,
    StateError,
    Step,
    share,
    strerror,
    version as __version__,
)

__all__ = [
    "ArrayError", "AuthError", "ConfigError", "ConnectionError", "Error", "NoGPUError",
    "NonFiniteError", "SizeError", "StateError", "Step", "share", "strerror", "__version__",
]
