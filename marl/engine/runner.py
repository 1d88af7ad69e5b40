"""BatchedEnvRunner: RLlib ``EnvRunner`` that steps ``B`` env copies as tensors.

RLlib's stock ``MultiAgentEnvRunner`` builds one Python episode object per
agent per step (≈0.3 ms per env step measured on 2 cores, ``docs/engine.md``); this
runner keeps RLlib's actor / weight-sync / checkpoint machinery but samples
with one batched forward per module per step and returns time-major tensors.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Collection, Dict, List, Optional, Tuple, Union, cast

import gymnasium as gym
import torch
import ray
from ray.rllib.core import COMPONENT_RL_MODULE
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME, WEIGHTS_SEQ_NO

from marl.engine.context import RunAccess
from marl.engine.resume import rng_state, set_rng_state
from marl.engine.rllib_seam import subcomponents, wants_component
from marl.engine.guards import StepGuard
from marl.engine.opponents import Opponents
from marl.env import EpisodeStats, MultiAgentEnv, Step
from marl.mapping import PolicyMapping

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

Buffer = Dict[str, List[torch.Tensor]]  # column -> one tensor per step


def stack(steps: List[Any]) -> Any:
    """Stack per-step tensors along a new time axis 0, key by key for structured observations."""
    if steps and isinstance(steps[0], dict):
        return {k: torch.stack([s[k] for s in steps]) for k in steps[0]}
    return torch.stack(steps)


class MappingFn:
    """Picklable ``agent_id -> module_id`` lookup (RLlib pickles configs into checkpoints)."""

    def __init__(self, table: Dict[str, str]):
        self.table = dict(table)

    def __call__(self, agent_id: Any, *args: Any, **kwargs: Any) -> str:  # RLlib: (AgentID, episode, ...)
        return self.table[agent_id]


class BatchedEnvRunner(RunAccess, EnvRunner, Checkpointable):
    """Samples ``rollout_length`` steps of all ``B`` env copies per :meth:`sample` call.

    The rollout (see :meth:`sample`) is a dict of time-major tensors; episode
    statistics of the episodes that ended during the call come under ``"metrics"``.
    """

    def __init__(self, *, config: AlgorithmConfig, **kwargs: Any) -> None:
        super().__init__(config=config, **kwargs)
        torch.set_num_threads(self.cfg.torch_threads)
        self.weights_seq_no = 0
        # RLlib annotates EnvRunner.env by its initial value (None); a runner's env is marl's batched env
        self.env: Optional[MultiAgentEnv] = None
        self._owns_env = True  # close the env at stop() unless it was handed in (attach_env)
        # a MultiRLModule of the algorithm's RLModules; their act / initial_state are the algorithms'
        # own (defined outside core, no common base class here), hence Any
        self.module: Any = None
        if self.worker_index:  # a remote runner builds its env now: errors show at start-up
            self.make_env(self.new_env())
        self.make_module()

    # ------------------------------------------------------------------ setup
    def attach_env(self, env: MultiAgentEnv) -> None:
        """Sample ``env`` itself (the driver's env object, for the local runner); its owner closes it."""
        self._owns_env = False
        self.make_env(env)

    def ensure_env(self) -> MultiAgentEnv:
        """The runner's env, built from the run's env spec on first use if none was attached."""
        env = self.env
        if env is None:
            env = self.new_env()
            self.make_env(env)
        return env

    def new_env(self) -> MultiAgentEnv:
        """An env of this runner's own: rebuilt from the run's env spec with the run's ``num_envs``,
        or a copy of an env built by hand (:meth:`~marl.engine.context.RunContext.make_env`)."""
        return self.run.make_env(num_envs=self.run.num_envs)

    # RLlib's make_env() builds its env from the config; marl's runners are handed theirs
    def make_env(self, env: MultiAgentEnv) -> None:  # type: ignore[override]
        """Use ``env`` for sampling and build the policy mapping for it."""
        self.env = env
        self.mapping = PolicyMapping(env.info, share=MappingFn(self.run.agent_to_module), agent_id=self.cfg.agent_id)
        self._last: Optional[Step] = None
        self._guard = StepGuard(env.info, self.cfg.non_finite, f"env runner {int(self.worker_index or 0)}")
        self.env_seed = self.cfg.seed + 10_000 * int(self.worker_index or 0)
        opp = Opponents(self.cfg, env.info, env.num_envs, self.env_seed + 7)  # competitive envs' co-players
        self.opponents = opp if opp.enabled else None

    def make_module(self) -> None:
        spec = self.config.get_multi_rl_module_spec(spaces=self.get_spaces(), inference_only=True)
        self.module = spec.build()
        self.module.foreach_module(lambda mid, m: m.eval())

    def get_spaces(self) -> Dict[str, Tuple[gym.Space, gym.Space]]:
        return {mid: (s.observation_space, s.action_space) for mid, s in self.run.module_spaces.items()}

    def assert_healthy(self) -> None:
        assert self.module is not None

    # ------------------------------------------------------------------ sampling
    def _reset(self, env: MultiAgentEnv) -> Step:
        step = self._guard(env.reset(seed=self.env_seed), reset=True)
        B = env.num_envs
        self._h: Dict[str, Optional[torch.Tensor]] = {
            mid: self.module[mid].initial_state((B, self.mapping.n_agents(mid))) for mid in self.mapping.modules
        }
        self._starts = torch.ones(B, dtype=torch.bool)
        self._stats = EpisodeStats(env.info)
        if self.opponents is not None:
            self.opponents.new_episodes(self._starts)
        return step

    def module_inputs(self, mid: str, step: Step) -> Tuple[Any, Optional[torch.Tensor], torch.Tensor]:
        """Observation (with agent id; a dict of keys for structured observations,
        :meth:`~marl.mapping.PolicyMapping.module_obs`), avail mask and alive mask of module ``mid``:
        ``[B, N_m, ...]``."""
        m = self.mapping
        obs = m.module_obs(mid, step.obs)
        avail = step.avail_actions.get(m.group_info(mid).name) if m.group_info(mid).discrete else None
        if avail is not None:  # a discrete group: its avail_actions are tensors
            avail = m.gather(mid, cast(Dict[str, torch.Tensor], step.avail_actions))
        return obs, avail, m.gather(mid, step.alive)

    def sample(self, num_steps: Optional[int] = None, explore: bool = True, **act_kwargs: Any) -> Dict[str, Any]:
        """Collect ``T = num_steps or rollout_length`` steps from all ``B`` copies.

        ``act_kwargs`` go to every module's ``act`` (e.g. ``epsilon`` for Q-learners).
        Returns a dict with ``modules[mid]``: ``obs [T+1, B, N, D]``, ``final_obs
        [T, B, N, D]``, ``actions [T, B, N(, A)]``, ``logp``, ``rewards``,
        ``alive`` ``[T, B, N]``, ``avail [T, B, N, A]`` and ``final_avail`` (discrete),
        ``h [T, B, N, H]`` (recurrent), one ``[T, B, N]`` entry per extra column the env declares
        (``EnvInfo.extra_columns``, e.g. an off-beat env's ``decision``); and ``state [T+1, B, S]``, ``final_state
        [T, B, S]``, ``terminated``, ``truncated``, ``starts`` ``[T, B]``, ``metrics``.
        """
        T = int(num_steps or self.cfg.rollout_length)
        env = self.ensure_env()
        if self._last is None:
            self._last = self._reset(env)
        buf: Dict[str, Buffer] = {mid: defaultdict(list) for mid in self.mapping.modules}
        glob: Buffer = defaultdict(list)
        step = self._last
        if self.opponents is not None:
            self.opponents.start_rollout(self)
        for _ in range(T):
            actions = {}
            for mid, b in buf.items():
                obs, avail, alive = self.module_inputs(mid, step)
                h = self._h[mid]
                a, logp, h_next = self.module[mid].act(obs, avail, h, explore=explore, **act_kwargs)
                actions[mid] = a
                b["obs"].append(obs)
                b["actions"].append(a)
                b["logp"].append(logp)
                b["alive"].append(alive)
                if avail is not None:
                    b["avail"].append(avail)
                if h is not None:
                    b["h"].append(h)
                self._h[mid] = h_next
            glob["state"].append(step.state)
            glob["starts"].append(self._starts)
            joint = self.mapping.scatter(actions)
            if self.opponents is not None:  # co-players' seats: their actions, not trained on
                joint, trained = self.opponents.override(self, step, joint)
                for mid, b in buf.items():
                    b["alive"][-1] = b["alive"][-1] & self.mapping.gather(mid, trained)
            nxt = self._guard(env.step(joint))  # shapes, NaN/inf (non_finite)
            self._record_step(nxt, buf, glob)
            step = nxt
        self._last = step
        for mid, b in buf.items():
            b["obs"].append(self.module_inputs(mid, step)[0])
        glob["state"].append(step.state)
        n = T * env.num_envs
        self.num_env_steps_sampled_lifetime += n
        out: Dict[str, Any] = {k: torch.stack(v) for k, v in glob.items()}
        out["modules"] = {mid: {k: stack(v) for k, v in b.items()} for mid, b in buf.items()}
        out["metrics"] = {"env_steps": n, **self._stats.pop(), **self._guard.pop_metrics()}
        return out

    def _record_step(self, nxt: Step, buf: Dict[str, Buffer], glob: Buffer) -> None:
        m = self.mapping
        final_obs = nxt.final_obs if nxt.final_obs is not None else nxt.obs
        for mid, b in buf.items():
            b["rewards"].append(m.gather(mid, nxt.reward))
            for col, per_group in nxt.extras.items():  # the env's declared extra columns, e.g. off-beat "decision"
                b[col].append(m.gather(mid, per_group))
            b["final_obs"].append(m.module_obs(mid, final_obs))
            if m.group_info(mid).discrete:
                b["final_avail"].append(self._final_avail(mid, nxt))
        glob["final_state"].append(nxt.final_state if nxt.final_state is not None else nxt.state)
        glob["terminated"].append(nxt.terminated)
        glob["truncated"].append(nxt.truncated)
        done = nxt.done
        for mid, h in self._h.items():
            if h is not None:  # new episodes start from a zero hidden state
                self._h[mid] = h * (~done).view(-1, 1, 1).to(h.dtype)
        self._starts = done.clone()
        self._stats.update(nxt)
        if self.opponents is not None:
            self.opponents.episodes_ended(done)

    def _final_avail(self, mid: str, nxt: Step) -> torch.Tensor:
        """Legal actions at the last observation of episodes that ended at ``nxt``
        (the env's ``final_avail_actions``; else all legal in ended rows)."""
        m = self.mapping
        g = m.group_info(mid)
        if nxt.final_avail_actions is not None and nxt.final_avail_actions.get(g.name) is not None:
            return m.gather(mid, cast(Dict[str, torch.Tensor], nxt.final_avail_actions)).bool()
        if nxt.avail_actions.get(g.name) is None:
            return torch.ones(self.ensure_env().num_envs, m.n_agents(mid), g.n_actions, dtype=torch.bool)
        avail = m.gather(mid, cast(Dict[str, torch.Tensor], nxt.avail_actions)).bool().clone()
        avail[nxt.done] = True
        return avail

    # ------------------------------------------------------------------ state
    def get_state(
        self,
        components: Optional[Union[str, Collection[str]]] = None,
        *,
        not_components: Optional[Union[str, Collection[str]]] = None,
        **kwargs: Any,
    ) -> Dict[str, Any]:
        state: Dict[str, Any] = {NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime}
        if wants_component(self, COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state(
                components=subcomponents(self, COMPONENT_RL_MODULE, components),
                not_components=subcomponents(self, COMPONENT_RL_MODULE, not_components),
                **kwargs,
            )
            state[WEIGHTS_SEQ_NO] = self.weights_seq_no
        return state

    def set_state(self, state: Dict[str, Any]) -> None:
        if COMPONENT_RL_MODULE in state:
            seq = state.get(WEIGHTS_SEQ_NO, 0)
            if seq == 0 or self.weights_seq_no < seq:
                weights = state[COMPONENT_RL_MODULE]
                if isinstance(weights, ray.ObjectRef):
                    weights = ray.get(weights)
                self.module.set_state(weights)
                opponents = getattr(self, "opponents", None)  # None before the env is made
                if opponents is not None:
                    opponents.weights_updated(self)
            if seq > 0:
                self.weights_seq_no = seq
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state:
            self.num_env_steps_sampled_lifetime = state[NUM_ENV_STEPS_SAMPLED_LIFETIME]

    def get_sampling_state(self) -> Dict[str, Any]:
        """What the next :meth:`sample` depends on beyond the weights, for exact resume
        (:mod:`marl.engine.resume`; taken only when a checkpoint is written).

        ``env``: the env's :meth:`~marl.env.MultiAgentEnv.get_state` (``None`` before the first
        sample or when the env cannot save it); with it, ``sampler``: the last :class:`Step` the
        runner acts on, recurrent states, episode starts and running episode statistics. A
        remote runner adds its process's generator states (``rng``); the local runner's are the
        driver's, which the trainer saves.
        """
        sampled = getattr(self, "_last", None) is not None  # False before the first sample (or env)
        env = self.env
        env_state = env.get_state() if sampled and env is not None else None
        state: Dict[str, Any] = {
            "worker_index": int(self.worker_index or 0),
            "env": env_state,
            "sampled": sampled,
            "seed": getattr(self, "env_seed", None),
            "env_steps": int(self.num_env_steps_sampled_lifetime),
            "num_envs": env.num_envs if env is not None else None,
            "env_name": repr(env),
        }
        if env_state is not None:
            state["sampler"] = copy.deepcopy(
                {"last": self._last, "h": self._h, "starts": self._starts, "stats": self._stats}
            )
        if self.worker_index:
            state["rng"] = rng_state()
        return state

    def set_sampling_state(self, state: Optional[Dict[str, Any]]) -> str:
        """Continue from a :meth:`get_sampling_state` dict.

        Returns:
            ``""`` when sampling continues exactly, else why the episodes restart (no saved
            state for this runner, an env that saves none, another ``num_envs``). A restart
            after a run that had sampled resets with a seed moved on by the env steps taken,
            so the resumed run does not replay its first episodes.
        """
        if state is None:
            return f"no saved state for env runner {int(self.worker_index or 0)}"
        reason = self._continue_sampling(self.ensure_env(), state)
        if state.get("rng") is not None and self.worker_index:
            set_rng_state(state["rng"])  # last: nothing drawn while restoring shifts the generators
        return reason

    def _continue_sampling(self, env: MultiAgentEnv, state: Dict[str, Any]) -> str:
        if state["env"] is not None and state["num_envs"] == env.num_envs:
            env.set_state(state["env"])
            s = copy.deepcopy(state["sampler"])
            self._last, self._h, self._starts, self._stats = s["last"], s["h"], s["starts"], s["stats"]
            return ""
        self._last = None
        if state["sampled"]:
            self.env_seed = int(state["seed"]) + int(state["env_steps"])
        if state["env"] is None:
            return (
                f"{state['env_name']} does not save its state (get_state() is None), its episodes restart"
                if state["sampled"]
                else ""
            )
        return f"num_envs changed from {state['num_envs']} to {env.num_envs}, the episodes restart"

    def get_ctor_args_and_kwargs(self) -> Tuple[Tuple[Any, ...], Dict[str, Any]]:
        return ((), {"config": self.config})

    def get_checkpointable_components(self) -> List[Tuple[str, Checkpointable]]:
        return [(COMPONENT_RL_MODULE, self.module)]

    def get_metrics(self) -> Dict[str, Any]:
        return {}

    def stop(self) -> None:
        if self.env is not None and self._owns_env:
            self.env.close()
