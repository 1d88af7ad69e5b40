"""The distributed engine on RLlib: the trainer (an RLlib ``Algorithm``), the batched env runner,
opponents for competitive envs, replay, fault handling and exact resume (``docs/engine.md``)."""
