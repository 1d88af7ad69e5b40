"""Carry trained agent networks to other scenarios: zero-shot (:func:`marl.load` with ``env=``)
and as the initialisation of a new run (config key ``init_from``).

HPN and DPN agents (``agent="hpn"`` / ``"dpn"``) have parameters whose shapes do not depend on the number of agents or
entities, so they load into the modules built for a scenario with other counts
(HPN transfer: Hao et al. 2022, arXiv 2203.05285, §5.4). A plain network's
input layer depends on the observation size and cannot be carried over: that is
an error naming the parameter. Learner-only parts (critics, value
normalisers) and mixers are rebuilt for the new scenario when their shapes differ.
"""

from __future__ import annotations

from typing import Dict, List

import torch
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI

from marl.errors import MarlError


def load_weights(module: torch.nn.Module, state: Dict[str, torch.Tensor], name: str = "") -> List[str]:
    """Copy ``state`` into ``module``; returns the learner-only parameters left at their fresh values.

    Parameters the module lacks (e.g. a critic, for an inference-only module)
    are ignored. A learner-only part (``module.get_non_inference_attributes()``)
    whose shapes differ is kept fresh and reported.

    Raises:
        MarlError: an acting parameter is missing from ``state`` or has another
            shape (a network whose size depends on the scenario).
    """
    own = module.state_dict()
    learner_only = tuple(module.get_non_inference_attributes()) if isinstance(module, InferenceOnlyAPI) else ()
    fresh, new = [], {}
    for key, value in own.items():
        top = key.split(".", 1)[0]
        src = state.get(key)
        if src is not None and src.shape == value.shape:
            new[key] = src
            continue
        if top in learner_only:
            fresh.append(key)
            new[key] = value
            continue
        have = "missing" if src is None else f"shape {tuple(src.shape)}"
        raise MarlError(
            f"Cannot carry module '{name}' over: parameter '{key}' is {have} in the checkpoint but has shape "
            f"{tuple(value.shape)} here. Only agent='hpn' and agent='dpn' keep their shapes across "
            f"numbers of agents and entities (ASN's environment stream reads the whole observation)."
        )
    module.load_state_dict(new)
    return fresh
