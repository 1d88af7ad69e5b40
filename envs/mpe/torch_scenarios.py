"""mpe2's ``World`` and scenarios over ``B`` copies as float64 torch tensors (used by
:class:`~marl.envs.mpe.batched.TorchMPEEnv`; the module docstring there says what matches mpe2).

Each function names the mpe2 1.1 code it reproduces. Additions happen in mpe2's
order (forces on an entity: its action, then each contact with entities of
increasing index; global rewards: landmark by landmark) so float64 results agree
to the last bits except inside ``logaddexp``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

__all__ = ["TorchWorld", "TorchScenario", "SCENARIOS"]

F64 = torch.float64


class TorchWorld:
    """Entity states ``pos``/``vel`` ``[B, E, dim_p]`` (agents first, then landmarks, mpe2's
    ``world.entities`` order), agent comm ``c`` ``[B, A, dim_c]``, and the constants read
    off a built mpe2 ``World`` (sizes, mass, movable, collide, silent, accel, max_speed, dt,
    damping, contact parameters).

    Raises:
        ValueError: the world has scripted agents or action / communication noise (not implemented).
    """

    def __init__(self, world: Any, num_envs: int):
        agents, entities = list(world.agents), list(world.agents) + list(world.landmarks)
        if any(a.action_callback is not None or a.u_noise or a.c_noise for a in agents):
            raise ValueError("scripted agents and action/communication noise are not implemented")
        self.A, self.E, self.B = len(agents), len(entities), int(num_envs)
        self.dim_p, self.dim_c = int(world.dim_p), int(world.dim_c)
        self.dt, self.damping = float(world.dt), float(world.damping)
        self.contact_force, self.contact_margin = float(world.contact_force), float(world.contact_margin)
        self.size = torch.tensor([e.size for e in entities], dtype=F64)
        self.mass = torch.tensor([e.mass for e in entities], dtype=F64)
        self.movable = torch.tensor([bool(e.movable) for e in entities])
        collide = torch.tensor([bool(e.collide) for e in entities])
        self.contact = collide[:, None] & collide[None, :] & ~torch.eye(self.E, dtype=torch.bool)
        self.contact &= self.movable[:, None]  # only a movable entity receives its contact force
        self.any_contact = bool(self.contact.any())
        self.max_speed = [e.max_speed for e in entities]
        self.silent = torch.tensor([bool(a.silent) for a in agents])
        self.agent_movable = [bool(a.movable) for a in agents]
        self.agent_silent = [bool(a.silent) for a in agents]
        self.sensitivity = [5.0 if a.accel is None else float(a.accel) for a in agents]
        self.pos = torch.zeros(self.B, self.E, self.dim_p, dtype=F64)
        self.vel = torch.zeros_like(self.pos)
        self.c = torch.zeros(self.B, self.A, self.dim_c, dtype=F64)

    # ------------------------------------------------------------------ actions
    def decode(self, actions: Sequence[torch.Tensor], continuous: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        """Per-agent actions (agent order; ``[B]`` int or ``[B, act_dim]`` float32) -> ``u [B, A, dim_p]``
        (already times the sensitivity) and the comm action ``c [B, A, dim_c]`` (mpe2
        ``SimpleEnv._execute_world_step`` and ``_set_action``)."""
        u = torch.zeros(self.B, self.A, self.dim_p, dtype=F64)
        c = torch.zeros(self.B, self.A, self.dim_c, dtype=F64)
        mdim = 2 * self.dim_p + 1
        for i, a in enumerate(actions):
            move, talk = self.agent_movable[i], not self.agent_silent[i]
            if continuous:
                if move:  # u[0] = a[2] - a[1], u[1] = a[4] - a[3], differences taken in float32
                    u[:, i, 0] = (a[:, 2] - a[:, 1]).to(F64)
                    u[:, i, 1] = (a[:, 4] - a[:, 3]).to(F64)
                if talk:
                    c[:, i] = a[:, mdim if move else 0 :].to(F64)
            else:
                a = a.long()
                if move:
                    m = a % mdim if talk else a
                    u[:, i, 0] = (m == 2).to(F64) - (m == 1).to(F64)
                    u[:, i, 1] = (m == 4).to(F64) - (m == 3).to(F64)
                    a = a // mdim
                if talk:
                    c[:, i] = torch.nn.functional.one_hot(a, self.dim_c).to(F64)
            u[:, i] *= self.sensitivity[i]
        return u, c

    # ------------------------------------------------------------------ physics
    def step(self, u: torch.Tensor, c_action: torch.Tensor) -> None:
        """mpe2 ``World.step``: action force, contact forces, integration, comm state."""
        force = torch.zeros_like(self.pos)
        force[:, : self.A] = u  # non-movable agents have u = 0 (mpe2 leaves their force None)
        if self.any_contact:
            force = self._add_contacts(force)
        mov = self.movable[None, :, None]
        self.pos = torch.where(mov, self.pos + self.vel * self.dt, self.pos)
        vel = self.vel * (1 - self.damping)
        vel = vel + (force / self.mass[None, :, None]) * self.dt
        self.vel = torch.where(mov, vel, self.vel)
        self._clip_speed()
        self.c = torch.where(self.silent[None, :, None], torch.zeros_like(c_action), c_action)

    def _add_contacts(self, force: torch.Tensor) -> torch.Tensor:
        """``World.get_collision_force`` for every ordered pair at once; added to each entity's
        force in increasing index of the other entity (mpe2's order)."""
        delta = self.pos[:, :, None, :] - self.pos[:, None, :, :]  # [B, E, E, p]: pos_i - pos_j
        dist = torch.sqrt(torch.sum(torch.square(delta), -1))
        dist_min = self.size[:, None] + self.size[None, :]
        k = self.contact_margin
        pen = torch.logaddexp(torch.zeros_like(dist), -(dist - dist_min) / k) * k
        pair = self.contact_force * delta / dist[..., None] * pen[..., None]
        for j in range(self.E):
            force = force + torch.where(self.contact[None, :, j, None], pair[:, :, j], 0.0)
        return force

    def _clip_speed(self) -> None:
        for e, top in enumerate(self.max_speed):
            if top is None:
                continue
            v = self.vel[:, e]
            speed = torch.sqrt(torch.square(v[:, 0]) + torch.square(v[:, 1]))
            self.vel[:, e] = torch.where((speed > top)[:, None], v / speed[:, None] * top, v)

    # ------------------------------------------------------------------ helpers
    def uniform_positions(self, rows: torch.Tensor, which: slice, generator: torch.Generator) -> None:
        """Entities ``which`` of the copies in ``rows``: positions uniform in ``[-1, 1]^dim_p``,
        velocities 0 (mpe2 scenarios' ``reset_world``)."""
        n, count = int(rows.sum()), len(range(self.E)[which])
        draw = torch.rand(n, count, self.dim_p, generator=generator, dtype=F64) * 2 - 1
        self.pos[rows, which] = draw
        self.vel[rows, which] = 0.0

    def get_state(self) -> Dict[str, torch.Tensor]:
        return {"pos": self.pos.clone(), "vel": self.vel.clone(), "c": self.c.clone()}

    def set_state(self, state: Dict[str, torch.Tensor]) -> None:
        self.pos, self.vel, self.c = state["pos"].clone(), state["vel"].clone(), state["c"].clone()


class TorchScenario:
    """A scenario's reset / observation / rewards over all copies. ``options``: the mpe2 kwargs
    it implements (others must be at their default)."""

    options: Tuple[str, ...] = ()

    def __init__(self, raw: Any):
        self.n_agents = len(raw.world.agents)

    def reset(self, world: TorchWorld, rows: torch.Tensor, generator: torch.Generator) -> None:
        """Agents then landmarks uniform in ``[-1, 1]^2``, zero velocity and comm."""
        world.uniform_positions(rows, slice(0, world.E), generator)
        world.c[rows] = 0.0

    def observation(self, world: TorchWorld) -> torch.Tensor:
        """``[B, state_dim]`` float64: every agent's observation, in agent order."""
        raise NotImplementedError

    def reward(self, world: TorchWorld) -> torch.Tensor:
        """``[B, A]`` float64, the scenario's ``reward(agent, world)`` of each agent."""
        raise NotImplementedError

    def global_reward(self, world: TorchWorld) -> torch.Tensor:
        """``[B]`` float64 (scenarios with ``local_ratio``)."""
        raise NotImplementedError

    def get_state(self) -> Dict[str, Any]:
        return {}

    def set_state(self, state: Dict[str, Any]) -> None:
        pass


def _others(n: int) -> torch.Tensor:
    """``[n, n-1]``: for each agent the other agents' indices, increasing."""
    return torch.tensor([[j for j in range(n) if j != i] for i in range(n)], dtype=torch.long)


def _landmark_dists(world: TorchWorld) -> torch.Tensor:
    """``[B, A, L]`` distances agent -> landmark (``a.pos - lm.pos`` as mpe2)."""
    d = world.pos[:, : world.A, None, :] - world.pos[:, None, world.A :, :]
    return torch.sqrt(torch.sum(torch.square(d), -1))


class SimpleSpread(TorchScenario):
    """mpe2 ``simple_spread_v3`` (``N`` agents and landmarks, ``local_ratio``): observation
    ``[vel, pos, landmarks - pos, others - pos, others' comm]``; global reward minus the sum over
    landmarks of the closest agent's distance; agent reward minus one per other agent closer
    than the sum of sizes."""

    options = ("N", "local_ratio")

    def __init__(self, raw: Any):
        super().__init__(raw)
        self.others = _others(self.n_agents)

    def observation(self, world: TorchWorld) -> torch.Tensor:
        A, B = world.A, world.B
        pos, vel = world.pos[:, :A], world.vel[:, :A]
        rel = world.pos[:, None, :, :] - pos[:, :, None, :]  # [B, A, E, p]: entity - agent
        landmarks = rel[:, :, A:].reshape(B, A, -1)
        idx = self.others
        others = rel[:, torch.arange(A)[:, None], idx].reshape(B, A, -1)
        comm = world.c[:, idx].reshape(B, A, -1)
        return torch.cat([vel, pos, landmarks, others, comm], -1).reshape(B, -1)

    def reward(self, world: TorchWorld) -> torch.Tensor:
        A = world.A
        d = world.pos[:, :A, None, :] - world.pos[:, None, :A, :]
        dist = torch.sqrt(torch.sum(torch.square(d), -1))
        hit = (dist < world.size[:A, None] + world.size[None, :A]) & ~torch.eye(A, dtype=torch.bool)
        return -hit.sum(-1).to(F64)

    def global_reward(self, world: TorchWorld) -> torch.Tensor:
        closest = _landmark_dists(world).min(1).values  # [B, L]
        rew = torch.zeros(world.B, dtype=F64)
        for lm in range(closest.shape[1]):
            rew = rew - closest[:, lm]
        return rew


class SimpleSpeakerListener(TorchScenario):
    """mpe2 ``simple_speaker_listener_v4``: the speaker (immobile) sees the goal landmark's
    colour and talks; the listener (silent) sees its velocity, the landmarks relative to it and
    the speaker's comm; both get minus the squared listener-goal distance."""

    COLORS = torch.tensor([[0.65, 0.15, 0.15], [0.15, 0.65, 0.15], [0.15, 0.15, 0.65]], dtype=F64)

    def __init__(self, raw: Any):
        super().__init__(raw)
        self.goal: Optional[torch.Tensor] = None

    def reset(self, world: TorchWorld, rows: torch.Tensor, generator: torch.Generator) -> None:
        if self.goal is None:
            self.goal = torch.zeros(world.B, dtype=torch.long)
        self.goal[rows] = torch.randint(0, 3, (int(rows.sum()),), generator=generator)
        super().reset(world, rows, generator)

    def observation(self, world: TorchWorld) -> torch.Tensor:
        B, A = world.B, world.A
        speaker = self.COLORS[self.goal]
        lis = world.pos[:, 1]
        rel = (world.pos[:, A:] - lis[:, None]).reshape(B, -1)
        return torch.cat([speaker, world.vel[:, 1], rel, world.c[:, 0]], -1)

    def reward(self, world: TorchWorld) -> torch.Tensor:
        goal_pos = world.pos[torch.arange(world.B), world.A + self.goal]
        dist2 = torch.sum(torch.square(world.pos[:, 1] - goal_pos), -1)
        return (-dist2)[:, None].expand(world.B, world.A).clone()

    def get_state(self) -> Dict[str, Any]:
        return {"goal": None if self.goal is None else self.goal.clone()}

    def set_state(self, state: Dict[str, Any]) -> None:
        self.goal = None if state["goal"] is None else state["goal"].clone()


def _dist(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``sqrt(sum((a - b)^2))`` over the last axis (mpe2's distance, same operation order)."""
    return torch.sqrt(torch.sum(torch.square(a - b), -1))


class SimpleReference(TorchScenario):
    """mpe2 ``simple_reference_v3``: two agents that move and talk (``dim_c=10``); agent ``i``'s
    goal is that the other agent reaches landmark ``g_i``. Observation ``[vel, landmarks - pos,
    colour of g_i, other's comm]``; agent reward minus the other agent's distance to ``g_i``,
    global reward their mean (``local_ratio`` blend)."""

    options = ("local_ratio",)
    COLORS = torch.tensor([[0.75, 0.25, 0.25], [0.25, 0.75, 0.25], [0.25, 0.25, 0.75]], dtype=F64)

    def __init__(self, raw: Any):
        super().__init__(raw)
        self.goal: Optional[torch.Tensor] = None  # [B, 2] landmark index of each agent's goal

    def reset(self, world: TorchWorld, rows: torch.Tensor, generator: torch.Generator) -> None:
        if self.goal is None:
            self.goal = torch.zeros(world.B, 2, dtype=torch.long)
        self.goal[rows] = torch.randint(0, 3, (int(rows.sum()), 2), generator=generator)
        super().reset(world, rows, generator)

    def observation(self, world: TorchWorld) -> torch.Tensor:
        B, A = world.B, world.A
        parts = []
        for i in range(A):
            rel = (world.pos[:, A:] - world.pos[:, i, None]).reshape(B, -1)
            parts += [world.vel[:, i], rel, self.COLORS[self.goal[:, i]], world.c[:, 1 - i]]
        return torch.cat(parts, -1)

    def reward(self, world: TorchWorld) -> torch.Tensor:
        rows = torch.arange(world.B)
        goal_pos = world.pos[rows[:, None], world.A + self.goal]  # [B, 2, p]
        other = world.pos[:, [1, 0]]  # agent i's goal_a is the other agent
        return -_dist(other, goal_pos)

    def global_reward(self, world: TorchWorld) -> torch.Tensor:
        r = self.reward(world)
        return (0 + r[:, 0] + r[:, 1]) / 2

    def get_state(self) -> Dict[str, Any]:
        return {"goal": None if self.goal is None else self.goal.clone()}

    def set_state(self, state: Dict[str, Any]) -> None:
        self.goal = None if state["goal"] is None else state["goal"].clone()


class SimpleAdversary(SimpleSpeakerListener):
    """mpe2 ``simple_adversary_v3`` (``N`` good agents, one adversary first, ``N`` landmarks, one of
    them the goal): good agents see ``[goal - pos, landmarks - pos, others - pos]``, the adversary
    ``[landmarks - pos, others - pos]``; the adversary gets minus its goal distance, each good agent
    the adversary's goal distance minus the closest good agent's."""

    options = ("N",)

    def __init__(self, raw: Any):
        TorchScenario.__init__(self, raw)
        self.goal = None
        self.others = _others(self.n_agents)

    def reset(self, world: TorchWorld, rows: torch.Tensor, generator: torch.Generator) -> None:
        if self.goal is None:
            self.goal = torch.zeros(world.B, dtype=torch.long)
        self.goal[rows] = torch.randint(0, world.E - world.A, (int(rows.sum()),), generator=generator)
        TorchScenario.reset(self, world, rows, generator)

    def _goal_pos(self, world: TorchWorld) -> torch.Tensor:
        return world.pos[torch.arange(world.B), world.A + self.goal]  # [B, p]

    def observation(self, world: TorchWorld) -> torch.Tensor:
        B, A = world.B, world.A
        pos = world.pos[:, :A]
        rel = world.pos[:, None, :, :] - pos[:, :, None, :]  # [B, A, E, p]: entity - agent
        landmarks = rel[:, :, A:].reshape(B, A, -1)
        others = rel[:, torch.arange(A)[:, None], self.others].reshape(B, A, -1)
        goal = self._goal_pos(world)[:, None] - pos  # [B, A, p]
        adversary = torch.cat([landmarks[:, 0], others[:, 0]], -1)
        good = torch.cat([goal[:, 1:], landmarks[:, 1:], others[:, 1:]], -1).reshape(B, -1)
        return torch.cat([adversary, good], -1)

    def reward(self, world: TorchWorld) -> torch.Tensor:
        d = _dist(world.pos[:, : world.A], self._goal_pos(world)[:, None])  # [B, A] agent -> goal
        adv_rew = 0 + d[:, 0]
        good = -d[:, 1:].min(-1).values + adv_rew
        return torch.cat([-d[:, :1], good[:, None].expand(world.B, world.A - 1)], -1)


SCENARIOS: Dict[str, type] = {
    "simple_spread": SimpleSpread,
    "simple_speaker_listener": SimpleSpeakerListener,
    "simple_reference": SimpleReference,
    "simple_adversary": SimpleAdversary,
}


def scenario_names() -> List[str]:
    """The scenarios this backend implements."""
    return list(SCENARIOS)
