"""Actor and value networks.

The package's names are imported on first use (``alf_async.networks.ActorCritic``
imports torch then), so that a torch-free module of it (``numpy_inference``)
can be loaded, as env workers that act do, without torch.
"""

from typing import Any

__all__ = ["ActorCritic", "ActorNetwork", "ValueNetwork", "mlp"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from alf_async.networks import actor_critic

        return getattr(actor_critic, name)
    raise AttributeError(f"module 'alf_async.networks' has no attribute {name!r}")
