"""The critic choice of on-policy config schemas, resolved once when a config is built.

Kept apart from the on-policy core (:mod:`marl.engine.on_policy`, which imports torch and Ray) so
that a config is loaded and checked without either.
"""

from __future__ import annotations

from marl.errors import MarlError

CRITICS = ("state", "team", "obs")  # what a critic sees; the config key also takes "auto"


def resolve_critic(critic: str, recurrent: bool) -> str:
    """The critic kind (one of :data:`CRITICS`) of a ``critic`` key value: ``auto`` is ``team`` for
    feed-forward actors and ``state`` for GRU actors, which ``team`` (a row per env step) does not serve.

    Raises:
        MarlError: ``team`` with recurrent actors (names the choices that work).
    """
    if critic == "team" and recurrent:
        raise MarlError(
            "critic=team evaluates the critic once per env step for MLP actors; with recurrent=true "
            "use critic=state (one row per agent) or critic=auto."
        )
    if critic != "auto":
        return critic
    return "state" if recurrent else "team"


class CriticChoice:
    """Mixin of on-policy config schemas (before the ``ConfigBase`` classes in the bases): the ``critic`` key
    resolved once, when the config is built (loaded, restored from a checkpoint, or ``replace``-d), into
    the attribute ``critic_kind`` (:func:`resolve_critic`). The key keeps its value: configs and
    checkpoints still say ``auto``, and old checkpoints that saved ``auto`` load as before.

    Raises:
        MarlError: ``critic=team`` with ``recurrent=true``.
    """

    critic: str
    recurrent: bool

    def __post_init__(self) -> None:
        super().__post_init__()  # type: ignore[misc]  # ConfigBase's checks come later in the MRO
        object.__setattr__(self, "critic_kind", resolve_critic(self.critic, self.recurrent))
