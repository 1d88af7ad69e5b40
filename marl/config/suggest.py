"""The suggestion of an unknown-key error: ``Did you mean 'lr'?``.

A new user writes a key as another library names it (``learning_rate``, ``ent_coef``,
``num_workers``), in another case (``numMinibatches``), as words for an abbreviation
(``learning_rate`` for ``lr``), or with a typo (``lrr``). :func:`suggest_key` tries, in
this order: the same words in marl's spelling, a known name of another library
(:data:`ALIASES`), the initials of the words, and the closest spelling (``difflib``).
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from marl.errors import closest

#: Names of other libraries' configs -> marl's key. Sources: the comments of configs/algos/*.yaml
#: (the official MAPPO code, pymarl, pymarl2), RLlib's AlgorithmConfig and Stable-Baselines3's PPO.
ALIASES = {
    "learning_rate": "lr",
    "n_epochs": "epochs",
    "num_epochs": "epochs",
    "num_sgd_iter": "epochs",
    "ppo_epoch": "epochs",
    "update_epochs": "epochs",
    "ent_coef": "entropy_coef",
    "entropy_coeff": "entropy_coef",
    "vf_coef": "value_loss_coef",
    "vf_loss_coeff": "value_loss_coef",
    "clip_range": "clip",
    "clip_param": "clip",
    "clip_coef": "clip",
    "clip_range_vf": "value_clip",
    "vf_clip_param": "value_clip",
    "lambda": "gae_lambda",
    "lambda_": "gae_lambda",
    "n_steps": "rollout_length",
    "rollout_fragment_length": "rollout_length",
    "num_workers": "num_env_runners",
    "num_rollout_workers": "num_env_runners",
    "n_envs": "num_envs",
    "num_envs_per_env_runner": "num_envs",
    "num_envs_per_worker": "num_envs",
    "n_rollout_threads": "num_envs",
    "num_mini_batch": "num_minibatches",
    "n_minibatches": "num_minibatches",
    "grad_clip": "max_grad_norm",
    "grad_norm_clip": "max_grad_norm",
    "opti_eps": "adam_eps",
    "use_valuenorm": "value_norm",
    "use_feature_normalization": "layer_norm",
    "hidden_size": "hidden",
    "rnn_hidden_dim": "hidden",
    "use_recurrent_policy": "recurrent",
    "data_chunk_length": "chunk_length",
    "num_gpus": "num_gpus_per_learner",
    "mixing_embed_dim": "mixing_embed",
    "obs_last_action": "last_action",
    "epsilon_finish": "epsilon_end",
    "epsilon_anneal_time": "epsilon_anneal_steps",
    "batch_size_run": "episodes_per_update",
    "target_update_freq": "target_update_interval",
    "learning_starts": "learning_starts_episodes",
    "replay_buffer_size": "buffer_size",
}


def spelled(name: str) -> str:
    """``name`` in marl's spelling: snake case, lower case (``numMiniBatches`` -> ``num_mini_batches``)."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(name).strip())
    return re.sub(r"[-\s.]+", "_", name).lower()


def suggest_key(name: str, valid: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` for the valid key a user most likely meant by ``name``, or ``""``.

    ``learning_rate`` -> ``lr`` (an alias, and its initials), ``LR`` -> ``lr`` (spelling),
    ``ent_coef`` -> ``entropy_coef`` (alias), ``lrr`` -> ``lr`` (closest, difflib ratio >= 0.5).
    """
    keys = list(valid)
    match = _meant(name, keys)
    return f" Did you mean '{match}'?" if match else closest(name, keys)


def marl_name(name: str) -> str:
    """What marl calls ``name``: its alias target, else the name in marl's spelling."""
    s = spelled(name)
    return ALIASES.get(s, s)


def _meant(name: str, keys: list) -> Optional[str]:
    s = spelled(name)
    initials = "".join(w[0] for w in s.split("_") if w)
    for candidate in (s, ALIASES.get(s), initials if "_" in s else None):
        if candidate in keys:
            return candidate
    return None
