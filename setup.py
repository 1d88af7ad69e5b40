"""Install marl. `envs/`, `algos/`, `benchmarks/` and `configs/` sit at the top of the repository
but install as `marl.envs`, `marl.algos`, `marl.benchmarks` and `marl.configs` (marl/plugins.py)."""

from setuptools import find_packages, setup

core = find_packages(include=["marl", "marl.*"])
envs = ["marl.envs"] + ["marl.envs." + p for p in find_packages("envs")]
algos = ["marl.algos"] + ["marl.algos." + p for p in find_packages("algos")]
benchmarks = ["marl.benchmarks"] + ["marl.benchmarks." + p for p in find_packages("benchmarks")]

setup(
    # The distribution is "marl-rllib": "marl" on PyPI is an unrelated project. The import name is marl.
    name="marl-rllib",
    version="0.1.0",
    description="Multi-agent reinforcement learning: one call from MPE to StarCraft, on RLlib",
    python_requires=">=3.10",
    packages=core + envs + algos + benchmarks + ["marl.configs"],
    package_dir={
        "marl.envs": "envs",
        "marl.algos": "algos",
        "marl.benchmarks": "benchmarks",
        "marl.configs": "configs",
    },
    # py.typed: marl ships its annotations (PEP 561), so type checkers read them in users' code
    package_data={
        "marl": ["py.typed"],
        "marl.configs": ["*.yaml", "algos/*.yaml", "envs/*.yaml", "benchmarks/*.yaml", "transforms/*.yaml"],
    },
    include_package_data=True,
    install_requires=[
        "torch>=2.1",  # the README / CI install path pins torch==2.13.0 (CPU wheel)
        # RLlib 2.60.x: its private API is used in marl/engine/rllib_seam.py only (docs/engine.md)
        "ray[rllib]==2.60.*",
        "pettingzoo>=1.25",
        "mpe2>=1.1",
        "vmas>=1.5",
        "gymnasium>=1.0",
        "tensorboard",
        "pyyaml",
        "filelock>=3.12",  # one writer per run folder (marl/rundir.py); the OS releases it when its process dies
        "tqdm",
        "matplotlib",
        # benchmark reports (marl.benchmarks.report): rliable's stratified-bootstrap statistics;
        # rliable 1.2 needs arch < 8, and arch 7 fails to import with pandas 3 (deprecate_kwarg)
        "rliable>=1.2",
        "arch>=5.3.1,<8",
        "pandas<3",
        # ratings of competitive populations (marl league): OpenSkill's Plackett-Luce model
        "openskill>=6.2",
    ],
    extras_require={
        # ruff and mypy: the lint, format and type checks of CI (pyproject.toml, .pre-commit-config.yaml)
        "dev": ["pytest>=8", "pytest-timeout", "pytest-xdist>=3.5", "ruff==0.17.*", "mypy==2.4.*"],
        # SMAX (JaxMARL's StarCraft-like env, runs on the CPU without the game)
        "smax": ["jaxmarl==0.2.0"],
        # JaxMARL's other families (Overcooked, Hanabi, Coin Game, STORM; MABrax with brax): the same package
        "jaxmarl": ["jaxmarl==0.2.0"],
        "mabrax": ["jaxmarl==0.2.0", "brax>=0.12"],
        # SMACv2 is not on PyPI; it also needs the StarCraft II binary (docs/starcraft.md)
        "smacv2": ["smacv2 @ git+https://github.com/oxwhirl/smacv2.git"],
        # LLM self-play (text games, MARS, Advantage Alignment): HF models, LoRA, OpenSpiel games
        "llm": ["transformers>=4.45", "peft>=0.13", "open_spiel>=1.5"],
        # Gymnasium multi-agent envs of EPyMARL's benchmarks (make_env("gymnasium", ...)): LBF and RWARE
        "gym-envs": ["lbforaging>=2.0", "rware>=2.0"],
        # MAgent2's PettingZoo envs (image views [view, view, 5] per agent; make_env(adversarial_pursuit_v4.parallel_env));
        # tested with magent2 0.3.4 under the pinned pettingzoo 1.27.0
        "magent2": ["magent2>=0.3"],
        # Multi-Agent MuJoCo (make_env("mamujoco", "HalfCheetah", agent_conf="2x3")); tested with
        # gymnasium-robotics 1.4.2 and mujoco 4.0.0 under the pinned gymnasium 1.2.2
        "mamujoco": ["gymnasium-robotics>=1.4", "mujoco>=3.1"],
        # TextArena's two-player games as text games (make_env("textarena", "TicTacToe-v0"))
        "textarena": ["textarena>=0.7"],
        # Google Research Football (make_env("football", ...)): gfootball has no wheels; pip builds its C++
        # engine from the sdist, which needs CMake, SDL2, Boost.Python and OpenGL headers first (the apt-get
        # line of docs/envs.md, "Google Research Football"); CI installs none of them
        "football": ["gfootball==2.10.2"],
        # experiment trackers as run callbacks (marl.loggers.WandbLogger / MLflowLogger; docs/logging.md).
        # mlflow-skinny: the tracking client without the server, UI and ML flavours (full mlflow adds
        # pyarrow, scikit-learn, SQLAlchemy, Flask; install it for a local sqlite:// store)
        "wandb": ["wandb>=0.17"],
        "mlflow": ["mlflow-skinny>=2.10"],
        # fast generation on GPU runners (generator="vllm")
        "vllm": ["transformers>=4.45", "peft>=0.13", "vllm"],
        # Melting Pot substrates (make_env("meltingpot", "clean_up")); dm-meltingpot's build downloads its
        # assets (bot models) from storage.googleapis.com and it pulls TensorFlow, used by the bots only
        "meltingpot": ["dm-meltingpot>=2.3", "dmlab2d>=1.0"],
    },
    entry_points={
        "console_scripts": ["marl=marl.cli:main"],
        # marl core finds envs, wrappers, algorithms and commands only through these (marl/plugins.py)
        "marl.plugins": ["envs = marl.envs", "algos = marl.algos", "benchmarks = marl.benchmarks"],
    },
)
