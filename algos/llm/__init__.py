"""LLM-agent self-play (``docs/algorithms/llm_selfplay.md``): a Hugging Face causal LM hosted in an RLlib
``TorchRLModule`` plays text games (:mod:`marl.text`) against itself, bots or past
copies, and learns with MARS, Advantage Alignment, REINFORCE or GRPO advantages.

Files: ``advantages`` (the estimators, pure tensor functions), ``policy`` (the
RLModule, model loading, LoRA, generation, tiny tokenizers), ``runner`` (the
EnvRunner that plays games), ``learner`` (the TorchLearner), ``selfplay``
(the Algorithm: training_step, evaluation against fixed opponents).
"""
