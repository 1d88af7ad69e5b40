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
    "advantage_alignment_tensor",
    trainer="marl.algos.advantage_alignment:AdvantageAlignment",
    schema="marl.algos.advantage_alignment_config:AAConfig",
    description="Advantage Alignment for neural policies (PPO on opponent-aware advantages; Duque et al. 2025); "
    "fit('advantage_alignment') on a tensor env runs it",
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
