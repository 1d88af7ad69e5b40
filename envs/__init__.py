"""Built-in env families and wrappers (installed as ``marl.envs``, found through the ``marl.plugins`` entry point).

Registration is strings only: the adapter modules (and mpe2 / vmas / pettingzoo)
are imported when an env of that family is first made, not on ``import marl``.
The wrappers register in :mod:`marl.envs.wrappers`.
"""

from marl.cli import register_eval_option
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
register_env(  # before "pettingzoo": that family's object factory takes any callable, a gym.Env class too
    "gymnasium",
    "marl.envs.gym_ma:make",
    "Gymnasium multi-agent envs with tuple spaces (lbforaging, rware; EPyMARL's gymma convention)",
    scenarios="marl.envs.gym_ma:scenarios",
    from_object="marl.envs.gym_ma:from_object",
)
register_env(
    "pettingzoo",
    "marl.envs.pettingzoo:make",
    "Any PettingZoo Parallel/AEC env by module path or registry id",
    scenarios="marl.envs.pettingzoo:scenarios",
    from_object="marl.envs.pettingzoo:from_object",
)
register_env(
    "smax",
    "marl.envs.smax:make",
    "SMAX (JaxMARL): StarCraft-like micromanagement in JAX, batched with jax.vmap; needs marl-rllib[smax]",
    scenarios="marl.envs.smax:scenarios",
)
register_env(
    "smacv2",
    "marl.envs.smacv2:make",
    "SMACv2 on StarCraft II (needs marl-rllib[smacv2], the game binary and SC2PATH)",
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
        scenarios=f"marl.envs.text.dilemmas:scenarios_{_game}",
    )
register_env(
    "openspiel",
    "marl.envs.text.openspiel:make",
    "Turn-based OpenSpiel games as text games (tic-tac-toe, poker, Connect Four, mini Hanabi, any pyspiel name); "
    "needs open_spiel",
    scenarios="marl.envs.text.openspiel:scenarios",
)
register_env(
    "textarena",
    "marl.envs.text.textarena:make",
    "Two-player TextArena games as text games (TicTacToe-v0, ConnectFour-v0, ... any two-player env id; "
    "Guertler et al. 2025, arXiv 2504.11442); needs textarena",
    scenarios="marl.envs.text.textarena:scenarios",
)
register_env(
    "trust_and_split",
    "marl.envs.text.trust_and_split:make",
    "Trust-and-Split: iterated 10-coin split with private values and one message per round (text game)",
    scenarios="marl.envs.text.trust_and_split:scenarios",
)
register_env(
    "stag_hunter",
    "marl.envs.stag_hunter:make",
    "Stag-Hunter grid (2 hunters, stag needs both catching at once, hares one); off-beat test bed",
    scenarios="marl.envs.stag_hunter:scenarios",
)
register_env(
    "quarry",
    "marl.envs.resource_games:make_quarry",
    "Quarry grid (3 miners; boulders need two miners mining at once, ore pays on delivery to the depot); "
    "off-beat test bed",
    scenarios="marl.envs.resource_games:scenarios",
)
register_env(
    "afforestation",
    "marl.envs.resource_games:make_afforestation",
    "Afforestation grid (2 planters; a sapling pays when it matures, more with planted neighbours); off-beat test bed",
    scenarios="marl.envs.resource_games:scenarios",
)
register_eval_option(
    "crash_rates",
    "marl.envs.wrappers.crash_eval:cli_crash_rates",
    "crash_rates=[0,0.1,0.2,0.3,0.5] or --crash-rates 0 0.1 0.2 0.3 0.5",
)

import marl.envs.wrappers  # noqa: E402,F401  registers the "offbeat" and "crash" wrappers

register_env(
    "mamujoco",
    "marl.envs.mamujoco:make",
    "Multi-Agent MuJoCo (gymnasium_robotics mamujoco_v1): continuous control split into agents, "
    "e.g. HalfCheetah agent_conf='2x3'; needs marl-rllib[mamujoco]",
    scenarios="marl.envs.mamujoco:scenarios",
)
register_env(
    "image_cue",
    "marl.envs.cue:make",
    "Toy task with Dict observations (a 16x16x3 uint8 image with the cue, a 4-vector without it)",
    scenarios="marl.envs.cue:scenarios",
)
register_env(
    "meltingpot",
    "marl.envs.meltingpot:make",
    "Melting Pot substrates (dm-meltingpot: commons_harvest__open, clean_up, coins, *_in_the_matrix__arena, ...): "
    "RGB + vector Dict observations, mixed-motive; needs marl-rllib[meltingpot]",
    scenarios="marl.envs.meltingpot:scenarios",
)
register_env(
    "football",
    "marl.envs.football:make",
    "Google Research Football (gfootball): academy scenarios and 11_vs_11_easy_stochastic, n left players as "
    "agents (Kurach et al. 2020, arXiv 1907.10387); needs marl-rllib[football], which compiles the C++ engine",
    scenarios="marl.envs.football:scenarios",
)
for _family, _what in (
    (
        "overcooked",
        "Overcooked (JaxMARL): the five classic layouts, 2 cooks, [H, W, 26] uint8 grids; optional shaped reward",
    ),
    ("hanabi", "Hanabi (JaxMARL): 2p-5p (or players=n), legal-move masks"),
    ("coin_game", "Coin Game (JaxMARL): 2 agents on a 3x3 torus, a sequential social dilemma"),
    ("storm", "STORM (JaxMARL): matrix games in a grid world (storm, storm_2p, storm_np), image + inventory obs"),
    (
        "mabrax",
        "Multi-agent Brax (JaxMARL): ant_4x2, halfcheetah_6x1, hopper_3x1, humanoid_9|8, walker2d_2x3; needs brax",
    ),
):
    register_env(
        _family,
        f"marl.envs.jaxmarl_envs:make_{_family}",
        f"{_what}; batched with jax.vmap; needs marl-rllib[jaxmarl]",
        scenarios=f"marl.envs.jaxmarl_envs:{_family}_scenarios",
    )
register_env(
    "iterated_matrix",
    "marl.envs.iterated_matrix:make",
    "General-sum iterated matrix games (ipd, stag_hunt, chicken, custom payoff): 2 agents, individual "
    "rewards, last joint action as observation",
    scenarios="marl.envs.iterated_matrix:scenarios",
)
