"""Stepping PettingZoo ``AECEnv`` copies: one batched step is a *cycle* or a *turn*.

* **cycle** (simultaneous-move games written as AEC, e.g. mpe2's ``env()``): every live
  agent acts once, in the env's own turn order, with the action collected for it before
  the cycle started; rewards of all sub-steps are summed. A later agent's action may have
  become illegal under the mask the env reports at its turn; it is replaced by a uniformly
  random legal one and counted in ``step.info["illegal_actions"]``.
* **turn** (turn-based games with action masks: chess, go, tic-tac-toe, connect four,
  poker): one batched step is one move of the agent whose turn it is. Every other live
  agent *waits*: its observation is its own view of the board after the move, and its
  mask allows exactly action 0, which is ignored. A waiting step thus has log-probability
  0 and entropy 0 (no policy-gradient signal), while its value target still sees the
  rewards the waiting agent receives (the -1 when the opponent wins). This is the
  standard turn-based formulation (PettingZoo's AEC model: Terry et al. 2021,
  arXiv:2009.14471, Sec. 3), so a policy always chooses with the board it moves on.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

AEC_MODES = ("cycle", "turn")


class AECStepping:
    """Mixin of :class:`~marl.envs.pettingzoo.PettingZooEnv`: the AEC half of ``step_env``.

    Needs ``self.layout``, ``self._io``, ``self._rngs``, ``self._rows``, ``self.info``,
    ``self._write``, ``self.read``, ``self.raw_error``, ``self.read_reward`` and ``self.aec_mode``
    (one of :data:`AEC_MODES`).
    """

    def _step_aec(self, b: int, env: Any, acts: List[Any], rew_row: np.ndarray, illegal: np.ndarray):
        """Step copy ``b`` by one cycle or one turn; returns ``(ended, truncated, last_state)``."""
        last_obs: Dict[str, Any] = {}
        truncd: Dict[str, bool] = {}
        if self.aec_mode == "turn":
            self._retire_finished(env, last_obs, truncd)
            if env.agents:
                self._move(b, env, env.agent_selection, acts, rew_row, illegal)
        else:
            acted = set()
            budget = 4 * len(self.layout.index) + 4  # guards against envs whose turn order never returns
            while env.agents and budget > 0:
                budget -= 1
                agent = env.agent_selection
                if env.terminations[agent] or env.truncations[agent]:
                    self._retire(env, agent, last_obs, truncd)
                    continue
                if agent in acted:
                    break
                self._move(b, env, agent, acts, rew_row, illegal)
                acted.add(agent)
        self._retire_finished(env, last_obs, truncd)
        return self._end_of_step(b, env, last_obs, truncd)

    def _move(self, b: int, env: Any, agent: str, acts: List[Any], rew_row: np.ndarray, illegal: np.ndarray) -> None:
        """Play ``agent``'s action (an illegal one replaced by a random legal one) and add the
        rewards of that sub-step to every agent still in the game."""
        idx = self.layout.index
        i = idx[agent]
        io = self._io[i]
        a = acts[i]
        if io.n:
            m = io.mask(env.observe(agent) if io.mask_in_obs else None, env.infos.get(agent))
            if m is not None and not m.any():
                raise self.raw_error(
                    "no_legal_action",
                    "it is this agent's turn and its action mask is all zero; give it at least one legal action",
                    agent,
                    "avail_actions",
                    b,
                )
            if m is not None and m.any() and not m[int(a)]:
                a = int(self._rngs[b].choice(np.flatnonzero(m)))
                illegal[b] += 1
        env.step(io.to_env(a))
        for other in env.agents:
            rew_row[idx[other]] += self.read_reward(env.rewards[other], other, b)

    @staticmethod
    def _retire(env: Any, agent: str, last_obs: Dict[str, Any], truncd: Dict[str, bool]) -> None:
        """Keep a leaving agent's last observation, then let PettingZoo remove it."""
        last_obs[agent] = env.observe(agent)
        truncd[agent] = bool(env.truncations[agent]) and not env.terminations[agent]
        env.step(None)

    def _retire_finished(self, env: Any, last_obs: Dict[str, Any], truncd: Dict[str, bool]) -> None:
        while env.agents and (env.terminations[env.agent_selection] or env.truncations[env.agent_selection]):
            self._retire(env, env.agent_selection, last_obs, truncd)

    def _end_of_step(
        self, b: int, env: Any, last_obs: Dict[str, Any], truncd: Dict[str, bool]
    ) -> Tuple[bool, bool, Any]:
        """Write every agent's observation, mask and alive flag; the episode's last state if it ended."""
        present = set(env.agents)
        ended = not present
        last = None
        if ended:
            last = self._rows.row(b)
            for a, o in last_obs.items():
                last.write(0, a, self.read(a, o, b))
        infos = env.infos
        for a in self.info.agents:
            alive = a in present
            self._write(b, a, env.observe(a) if alive else None, infos.get(a), alive)
        return ended, any(truncd.values()), last

    def waiting_mask(self, n: int) -> np.ndarray:
        """The mask of an alive agent with no legal action now (not its turn): only action 0
        (ignored) in turn mode, any action in cycle mode (its action is checked at its turn)."""
        if self.aec_mode == "turn":
            m = np.zeros(n, bool)
            m[0] = True
            return m
        return np.ones(n, bool)
