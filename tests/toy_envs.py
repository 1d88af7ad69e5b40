"""Small batched envs for engine tests (no external simulator)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from marl.env import EnvInfo, GroupInfo, MultiAgentEnv, Step


class MatchEnv(MultiAgentEnv):
    """Each agent sees a one-hot cue and is rewarded 1 for choosing the cued action.

    ``N`` agents, ``A`` actions, episodes of ``T`` steps (time-limit truncation).
    Random play earns ``T*N/A`` per episode (team sum), optimal ``T*N``.
    """

    def __init__(self, num_envs=8, N=2, A=3, T=5, seed=0):
        box = gym.spaces.Box(0.0, 1.0, (A,), np.float32)
        agents = [f"agent_{i}" for i in range(N)]
        self.info = EnvInfo(
            "toy",
            "match",
            agents,
            {"agent": GroupInfo("agent", agents, box, gym.spaces.Discrete(A))},
            state_dim=N * A,
            episode_limit=T,
            kind="cooperative",
            shared_reward=False,
            num_envs=num_envs,
        )
        self.N, self.A, self.T = N, A, T
        self.g = torch.Generator().manual_seed(seed)

    def _cue(self, n):
        return torch.randint(0, self.A, (n, self.N), generator=self.g)

    def _step(self, reward, term, trunc, final_obs=None, final_state=None):
        obs = torch.nn.functional.one_hot(self.cue, self.A).float()
        B = self.num_envs
        return Step(
            {"agent": obs},
            obs.reshape(B, -1),
            {"agent": torch.ones(B, self.N, self.A, dtype=torch.bool)},
            {"agent": torch.ones(B, self.N, dtype=torch.bool)},
            {"agent": reward},
            term,
            trunc,
            final_obs,
            final_state,
        )

    def reset(self, seed=None):
        if seed is not None:
            self.g.manual_seed(seed)
        self.cue = self._cue(self.num_envs)
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        B = self.num_envs
        return self._step(torch.zeros(B, self.N), torch.zeros(B, dtype=torch.bool), torch.zeros(B, dtype=torch.bool))

    def step(self, actions):
        a = actions["agent"]
        reward = (a == self.cue).float()
        self.t += 1
        trunc = self.t >= self.T
        old = torch.nn.functional.one_hot(self.cue, self.A).float()
        self.cue = self._cue(self.num_envs)
        self.t[trunc] = 0
        B = self.num_envs
        return self._step(reward, torch.zeros(B, dtype=torch.bool), trunc, {"agent": old}, old.reshape(B, -1))

    def get_state(self):
        """Cues, clocks and the generator state (exact resume)."""
        return {"cue": self.cue.clone(), "t": self.t.clone(), "g": self.g.get_state()}

    def set_state(self, state):
        self.cue, self.t = state["cue"].clone(), state["t"].clone()
        self.g.set_state(state["g"])


class NaNAfterEnv(MatchEnv):
    """MatchEnv whose rewards become NaN after ``after`` steps (to test divergence handling)."""

    def __init__(self, after=20, **kw):
        super().__init__(**kw)
        self.after, self.n = after, 0

    def step(self, actions):
        out = super().step(actions)
        self.n += 1
        if self.n > self.after:
            out.reward["agent"] = torch.full_like(out.reward["agent"], float("nan"))
        return out

    def get_state(self):
        return {**super().get_state(), "n": self.n}

    def set_state(self, state):
        super().set_state(state)
        self.n = state["n"]


class MultiDiscreteEnv(MatchEnv):
    """MatchEnv that declares a MultiDiscrete action space (unsupported by PPO)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.info.groups["agent"].action_space = gym.spaces.MultiDiscrete([2, 2])


class TargetEnv(MultiAgentEnv):
    """Continuous actions: each agent sees a target ``c`` in ``[-1, 1]^K`` and is rewarded ``-mean_k (a_k - c_k)^2``
    for its action ``a`` in ``Box(-2, 2, (K,))`` (bounds wider than the targets: the actor's scaling is tested).

    ``N`` agents, episodes of ``T`` steps (truncation), fresh uniform targets every step. A uniform
    random action earns ``-(4/3 + 1/3) = -5/3`` per step, the constant ``a = 0`` (the best blind action)
    ``-1/3``, the optimal policy ``0``.
    """

    def __init__(self, num_envs=8, N=2, K=2, T=5, seed=0):
        box = gym.spaces.Box(-1.0, 1.0, (K,), np.float32)
        agents = [f"agent_{i}" for i in range(N)]
        act = gym.spaces.Box(-2.0, 2.0, (K,), np.float32)
        self.info = EnvInfo(
            "toy",
            "target",
            agents,
            {"agent": GroupInfo("agent", agents, box, act)},
            state_dim=N * K,
            episode_limit=T,
            kind="cooperative",
            shared_reward=False,
            num_envs=num_envs,
        )
        self.N, self.K, self.T = N, K, T
        self.g = torch.Generator().manual_seed(seed)

    def _targets(self):
        return torch.rand(self.num_envs, self.N, self.K, generator=self.g) * 2 - 1

    def _step(self, reward, trunc):
        B = self.num_envs  # an ended episode's last observation is the next target (nothing carries over)
        return Step(
            {"agent": self.c},
            self.c.reshape(B, -1),
            {"agent": None},
            {"agent": torch.ones(B, self.N, dtype=torch.bool)},
            {"agent": reward},
            torch.zeros(B, dtype=torch.bool),
            trunc,
        )

    def reset(self, seed=None):
        if seed is not None:
            self.g.manual_seed(seed)
        self.c, self.t = self._targets(), torch.zeros(self.num_envs, dtype=torch.long)
        return self._step(torch.zeros(self.num_envs, self.N), torch.zeros(self.num_envs, dtype=torch.bool))

    def step(self, actions):
        reward = -((actions["agent"] - self.c) ** 2).mean(-1)
        self.t += 1
        trunc = self.t >= self.T
        self.c = self._targets()
        self.t[trunc] = 0
        return self._step(reward, trunc)

    def get_state(self):
        """Targets, clocks and the generator state (exact resume)."""
        return {"c": self.c.clone(), "t": self.t.clone(), "g": self.g.get_state()}

    def set_state(self, state):
        self.c, self.t = state["c"].clone(), state["t"].clone()
        self.g.set_state(state["g"])


class RecallEnv(TargetEnv):
    """TargetEnv where each agent's target ``c`` in ``[-1, 1]^K`` is drawn at the episode's start, kept for the whole
    episode and shown only at its first step: the observation is ``[c, 1]`` at ``t = 0`` and ``[0, 0]`` after. The
    global state shows every ``c`` at every step (a centralised critic can value the actions; the actors must
    remember). Reward ``-mean_k (a_k - c_k)^2`` per agent and step, as TargetEnv: an actor without memory can do no
    better than ``a = 0`` after the first step, ``-1/3`` per agent and step; remembering ``c``, ``0``."""

    def __init__(self, num_envs=8, N=2, K=1, T=3, seed=0):
        super().__init__(num_envs=num_envs, N=N, K=K, T=T, seed=seed)
        self.info.groups["agent"].obs_space = gym.spaces.Box(-1.0, 1.0, (K + 1,), np.float32)
        self.info.scenario = "recall"

    def _step(self, reward, trunc):
        step = super()._step(reward, trunc)
        first = (self.t == 0).float().view(-1, 1, 1).expand(-1, self.N, 1)
        step.obs = {"agent": torch.cat([self.c * first, first], -1)}
        return step

    def step(self, actions):
        reward = -((actions["agent"] - self.c) ** 2).mean(-1)
        self.t += 1
        trunc = self.t >= self.T
        self.c = torch.where(trunc.view(-1, 1, 1), self._targets(), self.c)  # a new target per new episode only
        self.t[trunc] = 0
        return self._step(reward, trunc)


class ImageTargetEnv(TargetEnv):
    """TargetEnv with structured observations: each agent's target ``c`` is shown only in ``"image"``, a
    ``Box(0, 255, (S, S, K), uint8)`` whose channel ``k`` is ``round((c_k + 1) * 127.5)`` at every pixel, beside
    ``"vector"``, ``Box(-1, 1, (2,))`` of uniform noise (no cue). Rewards as TargetEnv: random play about ``-5/3`` per
    agent and step, the best policy blind to the image ``-1/3`` (``a = 0``), reading the image about ``0``."""

    def __init__(self, num_envs=8, N=2, K=2, T=5, S=3, seed=0):
        super().__init__(num_envs=num_envs, N=N, K=K, T=T, seed=seed)
        image = gym.spaces.Box(0, 255, (S, S, K), np.uint8)
        vector = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.info.groups["agent"].obs_space = gym.spaces.Dict({"image": image, "vector": vector})
        self.info.scenario, self.S = "image_target", S

    def _step(self, reward, trunc):
        step = super()._step(reward, trunc)
        B, S = self.num_envs, self.S
        pixels = torch.round((self.c + 1) * 127.5).to(torch.uint8)  # [B, N, K]
        image = pixels[:, :, None, None, :].expand(B, self.N, S, S, self.K).contiguous()
        noise = torch.rand(B, self.N, 2, generator=self.g) * 2 - 1
        step.obs = {"agent": {"image": image, "vector": noise}}
        return step


class ImageMatchEnv(MatchEnv):
    """MatchEnv with structured observations: each agent's cue is shown only in ``"image"``, a
    ``Box(0, 255, (S, S, A), uint8)`` whose channel ``cue`` is 255 at every pixel (the others 0), beside ``"vector"``,
    ``Box(0, 1, (2,))`` = ``(t / T, 1 - t / T)``, the episode's progress (no cue). Rewards as MatchEnv: random play
    ``T N / A`` per episode, reading the image ``T N``. Saves its state (exact resume)."""

    def __init__(self, num_envs=8, N=2, A=3, T=5, S=3, seed=0):
        super().__init__(num_envs=num_envs, N=N, A=A, T=T, seed=seed)
        image = gym.spaces.Box(0, 255, (S, S, A), np.uint8)
        vector = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
        self.info.groups["agent"].obs_space = gym.spaces.Dict({"image": image, "vector": vector})
        self.info.scenario, self.S = "image_match", S

    def _structured(self, onehot):
        B, S = self.num_envs, self.S
        image = (onehot * 255).to(torch.uint8)[:, :, None, None, :].expand(B, self.N, S, S, self.A).contiguous()
        progress = (self.t.float() / self.T)[:, None, None].expand(B, self.N, 1)
        return {"image": image, "vector": torch.cat([progress, 1 - progress], -1)}

    def _step(self, reward, term, trunc, final_obs=None, final_state=None):
        step = super()._step(reward, term, trunc, final_obs, final_state)
        step.obs = {"agent": self._structured(step.obs["agent"])}
        if final_obs is not None:
            step.final_obs = {"agent": self._structured(final_obs["agent"])}
        return step
