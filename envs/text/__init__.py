"""Text games for LLM agents (:class:`marl.text.TextEnv`): iterated social dilemmas,
Trust-and-Split, OpenSpiel games and TextArena games. One file per game family."""
