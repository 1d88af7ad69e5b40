"""The base class of env wrappers (crash, off-beat, and any a user writes)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from marl.env.contract import MultiAgentEnv, Step
from marl.errors import MarlError


class Wrapper(MultiAgentEnv):
    """Base class of env wrappers: forwards everything it does not override to the inner env.

    ``info`` and any attribute the wrapper does not define (``action_names``,
    ``noop_action``, an env's running counters, ...) are read from the inner
    env; :meth:`reset`, :meth:`step` and :meth:`close` call it. A wrapper that
    changes the spaces sets its own ``self.info``; one that adds per-agent
    columns declares them in its ``info.extra_columns`` and passes the inner
    env's ``step.extras`` on.

    ``spec`` is *not* forwarded: rebuilding the inner env from its spec would
    silently drop the wrapper. :func:`marl.env.registry.make_env` sets the spec
    of the wrappers it applies (with their options); a wrapper built by hand
    has ``spec = None`` unless one is set.

    Args:
        env: the inner :class:`MultiAgentEnv`.
    Raises:
        MarlError: ``env`` is not a :class:`MultiAgentEnv`.
    """

    def __init__(self, env: MultiAgentEnv):
        if not isinstance(env, MultiAgentEnv):
            raise MarlError(f"{type(self).__name__} wraps a marl MultiAgentEnv, got {type(env).__name__}.")
        self.env = env

    @property
    def spec(self) -> Optional[Any]:
        return self.__dict__.get("_spec")

    @spec.setter
    def spec(self, value: Optional[Any]) -> None:
        self.__dict__["_spec"] = value

    @property
    def eval_kwargs(self) -> Dict[str, Any]:
        """The inner env's :attr:`MultiAgentEnv.eval_kwargs` (a wrapper's options stay as trained)."""
        return self.env.eval_kwargs

    @property
    def unwrapped(self) -> MultiAgentEnv:
        """The innermost env."""
        env = self.env
        return env.unwrapped if isinstance(env, Wrapper) else env

    def reset(self, seed: Optional[int] = None) -> Step:
        return self.env.reset(seed=seed)

    def step(self, actions: Dict[str, torch.Tensor]) -> Step:
        return self.env.step(actions)

    def close(self) -> None:
        self.env.close()

    def get_state(self) -> Optional[Dict[str, Any]]:
        """The inner env's state with this wrapper's own (:meth:`wrapper_state`); ``None`` when the
        inner env cannot save its state."""
        inner = self.env.get_state()
        return None if inner is None else {"env": inner, "wrapper": self.wrapper_state()}

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a :meth:`get_state` dict (inner env first, then the wrapper's own state)."""
        self.env.set_state(state["env"])
        self.load_wrapper_state(state["wrapper"])

    def wrapper_state(self) -> Dict[str, Any]:
        """This wrapper's own state (counters, flags, generator states), copied; ``{}`` by default.
        A wrapper that keeps state between steps overrides it and :meth:`load_wrapper_state`."""
        return {}

    def load_wrapper_state(self, state: Dict[str, Any]) -> None:
        """Restore what :meth:`wrapper_state` returned."""

    def callbacks(self) -> List[Any]:
        """The inner env's run callbacks; a wrapper that brings its own adds them to these."""
        return self.env.callbacks()

    def __getattr__(self, name: str) -> Any:
        # only reached for names the wrapper does not have; dunders (pickle, copy) stay local
        if name == "env" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self.env!r}>"
