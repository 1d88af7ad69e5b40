"""Built-in algorithms (installed as ``marl.algos``), registered by name with strings: a
trainer module (and Ray, torch) is imported when its algorithm is first built, not by
``marl list`` or when a config is loaded and checked. Each algorithm names its config
schema (``schema=``, a module without torch or Ray); the values are in
``configs/algos/<name>.yaml``. Batch transforms
(``reward_redistribution``, :mod:`marl.transforms`) register the same way; a transform's keys are in
its config section (``configs/transforms/<name>.yaml``)."""

from marl.config.registry import register_algo
from marl.transforms import register_transform

_PPO = dict(trainer="marl.algos.ppo:PPO", schema="marl.algos.ppo_config:PPOConfig")
_VALUE_DECOMP = dict(
    trainer="marl.algos.value_decomp:ValueDecomp", schema="marl.algos.value_decomp_config:ValueDecompConfig"
)
_LLM = dict(trainer="marl.algos.llm.selfplay:LLMSelfPlay", schema="marl.algos.llm.config:LLMConfig")

register_algo("mappo", **_PPO, description="Multi-agent PPO with a centralised critic on the global state")
register_algo(
    "ippo",
    **_PPO,
    description="Independent PPO: decentralised actors, critic on each agent's own observation (de Witt et al. 2020)",
)
register_algo(
    "qmix",
    **_VALUE_DECOMP,
    description="QMIX: monotonic hypernetwork mixer of recurrent agent Q-values on the global state",
)
register_algo("vdn", **_VALUE_DECOMP, description="VDN: team Q-value as the sum of recurrent agent Q-values")
register_algo(
    "iql", **_VALUE_DECOMP, description="Independent Q-learning: recurrent agent Q-networks, one TD loss per agent"
)
register_algo("reinforce", **_LLM, description="LLM self-play REINFORCE with a leave-one-out baseline (text games)")
register_algo(
    "mars", **_LLM, description="MARS: turn-level, role-normalised advantages for LLM self-play in strategic games"
)
register_algo(
    "advantage_alignment",
    **_LLM,
    description="Advantage Alignment: opponent-aware advantages for social dilemmas (text games; on tensor "
    "envs fit runs advantage_alignment_tensor)",
    variants={"tensor": "advantage_alignment_tensor"},
)
register_algo("grpo", **_LLM, description="LLM self-play with a GRPO-style trajectory baseline (text games)")
register_algo(
    "spiral",
    **_LLM,
    description="SPIRAL: zero-sum LLM self-play with role-conditioned advantage estimation (text games)",
)
register_algo(
    "happo",
    trainer="marl.algos.happo:HAPPO",
    schema="marl.algos.happo_config:HAPPOConfig",
    description="HAPPO: heterogeneous agents updated one by one in a random order (Kuba et al. 2022)",
)
register_algo(
    "hatrpo",
    trainer="marl.algos.happo:HATRPO",
    schema="marl.algos.happo_config:HATRPOConfig",
    description="HATRPO: heterogeneous agents, one trust-region step each, in a random order (Kuba et al. 2022)",
)

_TRPO = dict(trainer="marl.algos.trpo:TRPO", schema="marl.algos.trpo_config:TRPOConfig")
register_algo(
    "matrpo",
    **_TRPO,
    description="Multi-agent TRPO: trust-region actor steps (KL-bounded), centralised critic on the global state",
)
register_algo(
    "itrpo",
    **_TRPO,
    description="Independent TRPO: trust-region actor steps (KL-bounded), critic on each agent's own observation",
)
_A2C = dict(trainer="marl.algos.a2c:A2C", schema="marl.algos.a2c_config:A2CConfig")
register_algo(
    "maa2c",
    **_A2C,
    description="MAA2C: advantage actor-critic with a centralised critic on the state (Papoudakis et al. 2021)",
)
register_algo(
    "ia2c",
    **_A2C,
    description="IA2C: advantage actor-critic, critic on each agent's own observation (Papoudakis et al. 2021)",
)

_VD_AC = dict(trainer="marl.algos.vd_actor_critic:VDActorCritic", schema="marl.algos.vd_actor_critic_config:VDACConfig")
register_algo(
    "vda2c",
    **_VD_AC,
    description="VDA2C: actors on the team advantage of per-agent values mixed by VDN or QMIX (Su et al. 2021)",
)
register_algo(
    "vdppo",
    **_VD_AC,
    description="VDPPO: PPO's clipped loss on the team advantage of mixed per-agent values (Su et al. 2021, MARLlib)",
)
register_algo(
    "coma",
    trainer="marl.algos.coma:COMA",
    schema="marl.algos.coma_config:COMAConfig",
    description="COMA: counterfactual advantages from a centralised Q critic, discrete actions (Foerster et al. 2018)",
)
register_algo(
    "advantage_alignment_tensor",
    trainer="marl.algos.advantage_alignment:AdvantageAlignment",
    schema="marl.algos.advantage_alignment_config:AAConfig",
    description="Advantage Alignment for neural policies (PPO on opponent-aware advantages; Duque et al. 2025); "
    "fit('advantage_alignment') on a tensor env runs it",
)

_DDPG = dict(trainer="marl.algos.ddpg:DDPG", schema="marl.algos.ddpg_config:DDPGConfig")
register_algo(
    "maddpg",
    **_DDPG,
    description="MADDPG: deterministic actors, a centralised critic per agent on all observations and actions "
    "(Lowe et al. 2017)",
)
register_algo(
    "iddpg",
    **_DDPG,
    description="IDDPG: DDPG per agent, the critic on the agent's own observation and action (Lillicrap et al. 2016)",
)
register_algo(
    "matd3",
    **_DDPG,
    description="MATD3: MADDPG with TD3's twin critics, target smoothing and delayed actor updates (Fujimoto et al. 2018)",
)
register_algo(
    "facmac",
    trainer="marl.algos.facmac:FACMAC",
    schema="marl.algos.facmac_config:FACMACConfig",
    description="FACMAC: deterministic actors, per-agent critics mixed into Q_tot, the policy gradient over the "
    "joint action (Peng et al. 2021)",
)
_SAC = dict(trainer="marl.algos.sac:SAC", schema="marl.algos.sac_config:SACConfig")
register_algo(
    "masac",
    **_SAC,
    description="MASAC: soft actor-critic with a centralised twin-Q critic per agent, continuous or discrete "
    "actions, automatic entropy tuning (Haarnoja et al. 2018)",
)
register_algo(
    "isac",
    **_SAC,
    description="ISAC: soft actor-critic per agent, the critic on the agent's own observation and action "
    "(Haarnoja et al. 2018; discrete: Christodoulou 2019)",
)

register_transform(
    "causal_shift",
    "marl.algos.redistribution:CausalShift",
    description="off-beat envs: rewards move from where actions complete to where they started",
)
register_transform(
    "legem",
    "marl.algos.redistribution:Legem",
    config="marl.algos.legem_config:LegemConfig",
    description="off-beat envs: causal shift + episodic-memory shaping (LeGEM-style, reconstructed)",
)
