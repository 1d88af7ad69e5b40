"""Built-in env families (installed as ``marl.envs``).

Registration is strings only: the adapter modules (and mpe2 / vmas / pettingzoo)
are imported when an env of that family is first made, not on ``import marl``.
"""
from marl.env import register_env

register_env(
    "mpe",
    "marl.envs.mpe:make",
    "Multi-Agent Particle Envs (mpe2), batched fast path",
    scenarios="marl.envs.mpe:scenarios",
)
register_env(
    "vmas",
    "marl.envs.vmas:make",
    "VMAS vectorized multi-agent simulator (torch-native batch)",
    scenarios="marl.envs.vmas:scenarios",
)
register_env(
    "pettingzoo",
    "marl.envs.pettingzoo:make",
    "Any PettingZoo Parallel/AEC env by module path or registry id",
    scenarios="marl.envs.pettingzoo:scenarios",
)
register_env(
    "smax",
    "marl.envs.smax:make",
    "SMAX (JaxMARL): StarCraft-like micromanagement in JAX, batched with jax.vmap; needs marl[smax]",
    scenarios="marl.envs.smax:scenarios",
)
register_env(
    "smacv2",
    "marl.envs.smacv2:make",
    "SMACv2 on StarCraft II (needs marl[smacv2], the game binary and SC2PATH)",
    scenarios="marl.envs.smacv2:scenarios",
)
register_env(
    "matrix",
    "marl.envs.matrix:make",
    "Cooperative matrix games (two_step, climbing, penalty, custom payoff)",
    scenarios="marl.envs.matrix:scenarios",
)
for _game in ("ipd", "stag_hunt", "chicken"):
    register_env(
        _game,
        f"marl.envs.text.dilemmas:make_{_game}",
        f"Iterated {_game.replace('_', ' ')} as a text game for LLM agents (rounds=10)",
    )
