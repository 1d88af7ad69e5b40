"""``marl league``: cross-play and ratings of checkpoints and bots on a competitive env.

    marl league <run or checkpoint> [<run or checkpoint> ...] [bots=[random]] [episodes=50] [out=DIR]

A run folder stands for all its checkpoints (oldest first), a checkpoint folder for itself;
runs of tensor algorithms and of LLM self-play on text games alike (their bots are the game's own).
Every ordered pair plays ``episodes`` games per seating (:func:`marl.competitive.cross_play`);
the results go to a new folder ``out`` (default ``marl_league/<time>``), never into a run folder:

    league.json    names, score matrix, ratings, episodes, checkpoints
    league.md      the score matrix and the ratings table
    crossplay.png  the score matrix as a heatmap
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from marl.checkpoint import is_checkpoint, list_checkpoints, resolve_checkpoint
from marl.competitive import League, bot_for, cross_play, game_runner, ratings
from marl.errors import MarlError


def checkpoints_of(paths: Sequence[str]) -> List[Path]:
    """Expand run folders into their checkpoints (oldest first); keep checkpoint folders.

    Raises:
        MarlError: a path with no marl checkpoint.
    """
    out: List[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir() and not is_checkpoint(path) and list_checkpoints(path):
            out += list_checkpoints(path)
        else:
            out.append(resolve_checkpoint(str(path)))
    return out


def _names(ckpts: List[Path]) -> List[str]:
    """Short unique names: ``<run>/<checkpoint>`` only where two runs are mixed."""
    runs = {c.parent.parent for c in ckpts}
    return [c.name if len(runs) == 1 else f"{c.parent.parent.name}/{c.name}" for c in ckpts]


def run_league(
    paths: Sequence[str],
    bots: Sequence[str] = ("random",),
    episodes: int = 50,
    out: Optional[str] = None,
    seed: int = 0,
) -> Dict[str, Any]:
    """Cross-play every checkpoint of ``paths`` and every bot in ``bots``; rate them; write the
    files of the module docstring to a new folder ``out``. Returns the ``league.json`` dict.

    Raises:
        MarlError: fewer than two players, checkpoints of different envs, an env with fewer
            than two teams, an unknown bot, or an ``out`` folder that already has files.
    """
    import marl
    from marl.policy import check_env_fits

    ckpts = checkpoints_of(paths)
    results = [marl.load(str(c)) for c in ckpts]
    if not results:
        raise MarlError("marl league needs at least one run or checkpoint folder.")
    spec = results[0].env_spec
    if spec is None:
        raise MarlError(f"{ckpts[0]} has no env spec to rebuild its env (an env built by hand).")
    env = spec.make()
    runner = game_runner(env)
    if runner is None:  # a batched env: play up to 32 games at once
        env.close()
        env = spec.make(num_envs=min(episodes, 32))
    players: Dict[str, Any] = {}
    for name, res in zip(_names(ckpts), results):
        if runner is not None:
            runner.check_player(res.policy, env)
        else:
            check_env_fits(res.policy.mapping.info, env)
        players[name] = res.policy
    for b in bots:
        players[f"bot:{b}"] = bot_for(env, b, seed)
    folder = _new_folder(out)
    league = cross_play(env, players, episodes, seed)
    ratings(league, seed)
    env.close()
    report = {
        "names": league.names,
        "score": league.score.tolist(),
        "ratings": league.ratings,
        "episodes_per_seating": episodes,
        "checkpoints": [str(c) for c in ckpts],
        "bots": list(bots),
        "env": repr(spec),
    }
    (folder / "league.json").write_text(json.dumps(report, indent=2))
    (folder / "league.md").write_text(league_markdown(league, episodes))
    heatmap(league, folder / "crossplay.png")
    report["out"] = str(folder)
    return report


def _new_folder(out: Optional[str]) -> Path:
    folder = Path(out or Path("marl_league") / time.strftime("%Y%m%d-%H%M%S"))
    if folder.exists() and any(folder.iterdir()):
        raise MarlError(f"out={folder} already holds files; marl league writes only into a new or empty folder.")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def league_markdown(league: League, episodes: int) -> str:
    """The score matrix (row player's mean score against the column player; win 1, draw 1/2,
    both seatings) and the ratings table, best ``ordinal`` first."""
    short = [f"P{i}" for i in range(len(league.names))]
    lines = [
        f"# Cross-play ({episodes} games per seating)",
        "",
        "Row player's mean score against the column player (win 1, draw 1/2), both seats.",
        "",
        "| | " + " | ".join(short) + " |",
        "|---" * (len(short) + 1) + "|",
    ]
    for i, n in enumerate(league.names):
        lines.append(f"| {short[i]} {n} | " + " | ".join(f"{v:.2f}" for v in league.score[i]) + " |")
    lines += [
        "",
        "# Ratings (OpenSkill Plackett-Luce; ordinal = mu - 3 sigma)",
        "",
        "| player | mu | sigma | ordinal | mean score |",
        "|---|---|---|---|---|",
    ]
    order = sorted(league.names, key=lambda n: -league.ratings[n]["ordinal"])
    for n in order:
        r, i = league.ratings[n], league.names.index(n)
        others = [league.score[i, j] for j in range(len(league.names)) if j != i]
        lines.append(
            f"| {n} | {r['mu']:.2f} | {r['sigma']:.2f} | {r['ordinal']:.2f} | {sum(others) / len(others):.3f} |"
        )
    return "\n".join(lines) + "\n"


def heatmap(league: League, path: Path) -> None:
    """The score matrix as a PNG heatmap (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(league.names)
    fig, ax = plt.subplots(figsize=(1.2 + 0.7 * n, 1.0 + 0.6 * n))
    im = ax.imshow(league.score, vmin=0, vmax=1, cmap="RdBu")
    ax.set_xticks(range(n), league.names, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), league.names, fontsize=8)
    for i in range(n):
        for j in range(n):
            ax.text(j, i, f"{league.score[i, j]:.2f}", ha="center", va="center", fontsize=7)
    ax.set_title("row player's score vs column player")
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
