"""Actor and value networks."""

from alf_async.networks.actor_critic import ActorCritic, ActorNetwork, ValueNetwork, mlp

__all__ = ["ActorCritic", "ActorNetwork", "ValueNetwork", "mlp"]
