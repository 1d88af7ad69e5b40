"""Default configurations (YAML), installed as ``marl.configs``."""
