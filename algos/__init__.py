"""Built-in algorithms (installed as ``marl.algos``), registered by name with strings: a
trainer module (and Ray) is imported when its algorithm is first used, not by ``marl list``.
Each trainer names its config schema in ``config_class``; the values are in
``configs/algos/<name>.yaml``. Batch transforms (``reward_redistribution``, :mod:`marl.transforms`)
register the same way; a transform's keys are in its config section (``configs/transforms/<name>.yaml``)."""
from marl.config.registry import register_algo
from marl.transforms import register_transform

register_algo("mappo", "marl.algos.ppo:PPO",
              "Multi-agent PPO with a centralised critic on the global state")
register_algo("ippo", "marl.algos.ppo:PPO",
              "Independent PPO: decentralised actors, critic on each agent's own observation (de Witt et al. 2020)")
register_algo("qmix", "marl.algos.value_decomp:ValueDecomp",
              "QMIX: monotonic hypernetwork mixer of recurrent agent Q-values on the global state")
register_algo("vdn", "marl.algos.value_decomp:ValueDecomp",
              "VDN: team Q-value as the sum of recurrent agent Q-values")
register_algo("iql", "marl.algos.value_decomp:ValueDecomp",
              "Independent Q-learning: recurrent agent Q-networks, one TD loss per agent")
register_algo("reinforce", "marl.algos.llm.selfplay:LLMSelfPlay",
              "LLM self-play REINFORCE with a leave-one-out baseline (text games)")
register_algo("mars", "marl.algos.llm.selfplay:LLMSelfPlay",
              "MARS: turn-level, role-normalised advantages for LLM self-play in strategic games")
register_algo("advantage_alignment", "marl.algos.llm.selfplay:LLMSelfPlay",
              "Advantage Alignment: opponent-aware advantages for social dilemmas (text games)")
register_algo("grpo", "marl.algos.llm.selfplay:LLMSelfPlay",
              "LLM self-play with a GRPO-style trajectory baseline (text games)")
register_algo("spiral", "marl.algos.llm.selfplay:LLMSelfPlay",
              "SPIRAL: zero-sum LLM self-play with role-conditioned advantage estimation (text games)")

register_transform("causal_shift", "marl.algos.redistribution:CausalShift",
                   description="off-beat envs: rewards move from where actions complete to where they started")
register_transform("legem", "marl.algos.redistribution:Legem", config="marl.algos.legem_config:LegemConfig",
                   description="off-beat envs: causal shift + episodic-memory shaping (LeGEM-style, reconstructed)")
