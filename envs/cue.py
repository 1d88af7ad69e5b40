"""Image cue: a batched toy task whose rewarded action is visible only in an image observation.

Each step, every agent sees its own ``size x size x 3`` uint8 image with one bright
``patch x patch`` square in one of ``n_actions`` horizontal bands (band ``k`` of the
image's rows, a random column and colour); its rewarded action is ``k``. The
``"vector"`` key holds 4 float32 values that carry nothing about the cue (the
episode's progress ``t / limit`` and three uniform noise values), so a policy that
ignores the image is right with probability ``1 / n_actions`` at best. Reward: 1 per
agent per step whose action matches its cue, 0 otherwise; episodes last ``limit``
steps (a truncation). The cue of every agent is drawn anew at every step.

Observation spaces (``obs=``): ``"dict"`` (default) ``Dict(image: Box(size, size, 3)
uint8, vector: Box(4,) float32)``; ``"image"`` the image alone (a rank-3 Box). The global
state is ``[B, N * (n_actions + 4)]``: each agent's cue one-hot and vector, so a
centralised critic can value states. It is the test bed of marl's structured-observation
path (docs/observations.md): uint8 images batched ``[B, N, H, W, C]``, per-key encoders.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, GroupInfo, MarlError, MultiAgentEnv, Observation, Step
from marl.envs.grid import check_ints

VECTOR_DIM = 4
OBS_KINDS = ("dict", "image")


def scenarios() -> List[str]:
    """One scenario, ``"default"`` (the task is set by keyword arguments)."""
    return ["default"]


class ImageCueEnv(MultiAgentEnv):
    """``B`` copies of the image-cue task (module docstring).

    Args:
        num_envs: ``B``; n_agents: ``N`` (one group ``"agent"``); n_actions: actions (= bands of
            the image, ``2 <= n_actions <= size // patch``); size: image side in pixels;
        patch: side of the cue square; limit: steps per episode; obs: ``"dict"`` or ``"image"``.
    Raises:
        MarlError: a bad argument (named, with the valid values).
    """

    def __init__(
        self,
        num_envs: int = 8,
        n_agents: int = 2,
        n_actions: int = 4,
        size: int = 16,
        patch: int = 3,
        limit: int = 8,
        obs: str = "dict",
        seed: int = 0,
    ):
        check_ints(("num_envs", num_envs, 1), ("n_agents", n_agents, 1), ("size", size, 4), ("patch", patch, 1))
        check_ints(("n_actions", n_actions, 2), ("limit", limit, 1))
        if obs not in OBS_KINDS:
            raise MarlError(f"obs must be one of {', '.join(OBS_KINDS)}, got {obs!r}.")
        if n_actions * patch > size:
            raise MarlError(
                f"n_actions * patch must fit the image: {n_actions} bands of {patch} rows need size >= "
                f"{n_actions * patch}, got size={size}."
            )
        self.B, self.N, self.A, self.size, self.patch, self.limit = num_envs, n_agents, n_actions, size, patch, limit
        image = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
        vector = gym.spaces.Box(-1.0, 1.0, (VECTOR_DIM,), np.float32)
        space: gym.spaces.Space = gym.spaces.Dict({"image": image, "vector": vector}) if obs == "dict" else image
        self.kind = obs
        agents = [f"agent_{i}" for i in range(n_agents)]
        self.info = EnvInfo(
            family="image_cue",
            scenario="default",
            agents=agents,
            groups={"agent": GroupInfo("agent", agents, space, gym.spaces.Discrete(n_actions))},
            state_dim=n_agents * (n_actions + VECTOR_DIM),
            episode_limit=limit,
            shared_reward=False,
            num_envs=num_envs,
        )
        self._gen = torch.Generator().manual_seed(seed)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.cue = torch.zeros(num_envs, n_agents, dtype=torch.long)
        self._obs: Dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ observations
    def _draw(self, rows: torch.Tensor) -> None:
        """New cues, images and vectors in ``rows`` (``[B]`` bool)."""
        n = int(rows.sum())
        if n == 0:
            return
        N, S, P = self.N, self.size, self.patch
        g = self._gen
        cue = torch.randint(0, self.A, (n, N), generator=g)
        band = S // self.A
        top = cue * band + torch.randint(0, band - P + 1, (n, N), generator=g)
        left = torch.randint(0, S - P + 1, (n, N), generator=g)
        colour = torch.randint(128, 256, (n, N, 3), generator=g).to(torch.uint8)
        img = torch.zeros(n, N, S, S, 3, dtype=torch.uint8)
        ys, xs = torch.arange(S).view(1, 1, S, 1), torch.arange(S).view(1, 1, 1, S)
        inside = (ys >= top[..., None, None]) & (ys < top[..., None, None] + P)
        inside = inside & (xs >= left[..., None, None]) & (xs < left[..., None, None] + P)
        img = torch.where(inside[..., None], colour[:, :, None, None, :], img)
        noise = torch.rand(n, N, VECTOR_DIM - 1, generator=g) * 2 - 1
        progress = (self.t[rows].float() / self.limit)[:, None, None].expand(n, N, 1)
        self.cue[rows] = cue
        self._obs["image"][rows] = img
        self._obs["vector"][rows] = torch.cat([progress, noise], -1)

    def _observation(self) -> Observation:
        obs: Any = {k: v.clone() for k, v in self._obs.items()}
        if self.kind == "image":
            obs = obs["image"]
        onehot = torch.nn.functional.one_hot(self.cue, self.A).float()
        state = torch.cat([onehot, self._obs["vector"]], -1).reshape(self.B, -1)
        avail = torch.ones(self.B, self.N, self.A, dtype=torch.bool)
        return Observation(
            {"agent": obs}, state, {"agent": avail}, {"agent": torch.ones(self.B, self.N, dtype=torch.bool)}
        )

    # ------------------------------------------------------------------ the contract
    def reset(self, seed: Optional[int] = None) -> Step:
        if seed is not None:
            self._gen.manual_seed(int(seed))
        B, N, S = self.B, self.N, self.size
        self._obs = {"image": torch.zeros(B, N, S, S, 3, dtype=torch.uint8), "vector": torch.zeros(B, N, VECTOR_DIM)}
        self.t.zero_()
        self._draw(torch.ones(B, dtype=torch.bool))
        return Step.at_reset(self._observation())

    def step_env(self, actions: Dict[str, torch.Tensor]) -> Step:
        if not self._obs:
            raise MarlError("ImageCueEnv.step before reset: call env.reset() first.")
        hit = (actions["agent"] == self.cue).float()  # [B, N]
        self.t += 1
        truncated = self.t >= self.limit
        self._draw(~truncated)  # the episode's last observation stays in the rows that end
        return self._step(hit, truncated)

    def reset_rows(self, rows: torch.Tensor) -> Observation:
        self.t[rows] = 0
        self._draw(rows)
        return self._observation()

    def _step(self, reward: torch.Tensor, truncated: torch.Tensor) -> Step:
        ob = self._observation()
        return Step(
            obs=ob.obs,
            state=ob.state,
            avail_actions=ob.avail_actions,
            alive=ob.alive,
            reward={"agent": reward},
            terminated=torch.zeros(self.B, dtype=torch.bool),
            truncated=truncated,
        )


def make(scenario: Optional[str] = None, num_envs: int = 8, **kwargs: Any) -> ImageCueEnv:
    """``make_env("image_cue", num_envs=B, obs="dict" | "image", size=16, ...)`` (:class:`ImageCueEnv`).

    Raises:
        MarlError: an unknown scenario (only ``"default"``) or a bad argument.
    """
    if scenario not in (None, "default"):
        raise MarlError(f"image_cue has one scenario, 'default'; got {scenario!r}.")
    return ImageCueEnv(num_envs=num_envs, **kwargs)
